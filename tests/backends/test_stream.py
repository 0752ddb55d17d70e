"""Reading a streamed response: backends/stream.py."""

from sweetspot.backends.stream import _has_choices


def test_choice_detection_without_parsing():
    assert _has_choices(b'{"id":"x","choices":[{"index":0,"text":" w1"}],"usage":null}')
    assert _has_choices(b'{"choices": [ {"delta": {"content": "]"}}]}')
    assert not _has_choices(b'{"id":"x","choices":[],"usage":{"completion_tokens":3}}')
    assert not _has_choices(b'{"choices": [ ], "usage": {"completion_tokens": 3}}')
    assert not _has_choices(b'{"error": {"message": "boom"}}')
