"""Where to put point labels so that none overlaps another, a marked point or the plot's edge.

A small greedy search, enough for the handful of labels a report figure carries (the picks on the
Pareto plot): each label in turn tries positions around its point, nearest first, and takes the
first whose box stays inside the bounds and touches no box placed before it and no obstacle
(the data points, the legend). When every position collides it takes the one that overlaps
least, so a label is always placed. Everything is in display units (pixels), y pointing up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Point = tuple[float, float]
Size = tuple[float, float]

# Unit directions tried at each distance: right and left first (labels read sideways), then
# the diagonals, then straight up and down.
DIRECTIONS = ((1, 0), (-1, 0), (1, 1), (-1, 1), (1, -1), (-1, -1), (0, 1), (0, -1))
DISTANCES = (1.0, 2.5, 4.0, 6.0, 9.0)  # multiples of ``gap``


@dataclass(frozen=True, slots=True)
class Box:
    x0: float
    y0: float
    x1: float
    y1: float

    @staticmethod
    def around(centre: Point, size: Size) -> Box:
        (x, y), (w, h) = centre, size
        return Box(x - w / 2, y - h / 2, x + w / 2, y + h / 2)

    def overlap(self, other: Box) -> float:
        """The area both boxes cover (0 when they only touch)."""
        w = min(self.x1, other.x1) - max(self.x0, other.x0)
        h = min(self.y1, other.y1) - max(self.y0, other.y0)
        return w * h if w > 0 and h > 0 else 0.0

    def outside(self, bounds: Box) -> float:
        """The area of this box that lies outside ``bounds``."""
        return (self.x1 - self.x0) * (self.y1 - self.y0) - self.overlap(bounds)


def place_labels(anchors: Sequence[Point], sizes: Sequence[Size], bounds: Box,
                 obstacles: Sequence[Box] = (), gap: float = 6.0) -> tuple[Point, ...]:
    """Each label's centre offset (dx, dy) from its anchor, labels placed in the given order."""
    placed: list[Box] = []
    offsets = []
    for anchor, size in zip(anchors, sizes, strict=True):
        best: tuple[float, Point, Box] | None = None
        for offset in _candidates(size, gap):
            box = Box.around((anchor[0] + offset[0], anchor[1] + offset[1]), size)
            cost = (10 * box.outside(bounds) + sum(box.overlap(b) for b in placed)
                    + sum(box.overlap(b) for b in obstacles))
            if best is None or cost < best[0]:
                best = (cost, offset, box)
            if cost == 0:
                break
        assert best is not None
        placed.append(best[2])
        offsets.append(best[1])
    return tuple(offsets)


def _candidates(size: Size, gap: float) -> list[Point]:
    """Centre offsets that keep the label's near edge ``distance * gap`` from the anchor."""
    w, h = size
    out = []
    for distance in DISTANCES:
        d = distance * gap
        for ux, uy in DIRECTIONS:
            out.append((ux * (d + w / 2), uy * (d + h / 2)))
    return out
