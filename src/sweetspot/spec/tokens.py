"""A text's length in tokens: counted with the model's own tokenizer where one is given (a
folder holding ``tokenizer.json``, or that file), as ``vllm bench serve`` counts a ShareGPT
conversation (``len(tokenizer(text).input_ids)``, special tokens included); else estimated at
``TOKENS_PER_CHAR``, about four characters per token for English under the common BPE
vocabularies. The estimate is the stated fallback: a workload from recorded text says which of
the two measured it (``WorkloadSpec.description``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sweetspot._errors import SweetspotError

__all__ = ["TOKENS_PER_CHAR", "TokenCounter", "estimate_tokens", "tokenizer_counter"]

TOKENS_PER_CHAR = 0.25
TokenCounter = Callable[[str], int]


def estimate_tokens(text: str) -> int:
    """About a quarter of the characters (never 0)."""
    return max(1, round(len(text) * TOKENS_PER_CHAR))


def tokenizer_counter(path: str | Path) -> TokenCounter:
    """A counter that encodes with the tokenizer at ``path`` (a folder with tokenizer.json,
    or the file itself)."""
    file = Path(path)
    if file.is_dir():
        file = file / "tokenizer.json"
    if not file.is_file():
        raise SweetspotError(f"no tokenizer at {path}: counting tokens needs a tokenizer.json "
                             "(a model folder's, or the file)")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise SweetspotError("counting tokens with --tokenizer needs the tokenizers package: "
                             "pip install 'vllm-sweetspot[tokenizer]'") from None
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as exc:  # the library's own parse error, whatever its class
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SweetspotError(f"cannot read the tokenizer {file}: {first}") from None

    def count(text: str) -> int:
        return max(1, len(tokenizer.encode(text).ids))

    return count
