"""Label placement: no label on another, on a marked point, or past the plot's edge."""

from __future__ import annotations

import itertools

from sweetspot.report.placement import Box, place_labels

BOUNDS = Box(0, 0, 600, 400)


def boxes(anchors, sizes, offsets):
    return [Box.around((a[0] + o[0], a[1] + o[1]), s)
            for a, s, o in zip(anchors, sizes, offsets, strict=True)]


def test_labels_of_one_spot_do_not_overlap():
    anchors = [(300, 200)] * 4 + [(303, 201)]  # picks of one trial, and a near twin
    sizes = [(120, 14)] * 5
    placed = boxes(anchors, sizes, place_labels(anchors, sizes, BOUNDS))
    for a, b in itertools.combinations(placed, 2):
        assert a.overlap(b) == 0
    assert all(b.outside(BOUNDS) == 0 for b in placed)


def test_a_lone_label_sits_right_of_its_point():
    (offset,) = place_labels([(100, 100)], [(80, 10)], BOUNDS, gap=6)
    assert offset == (6 + 40, 0)


def test_labels_stay_inside_the_bounds():
    anchors = [(595, 395), (5, 5)]  # top-right and bottom-left corners
    sizes = [(150, 14), (150, 14)]
    placed = boxes(anchors, sizes, place_labels(anchors, sizes, BOUNDS))
    assert all(b.outside(BOUNDS) == 0 for b in placed)


def test_labels_avoid_obstacles():
    legend = Box(0, 300, 200, 400)
    point = Box(140, 95, 150, 105)  # a data point right of the label's anchor
    anchors, sizes = [(100, 100), (20, 290)], [(60, 12), (60, 12)]
    placed = boxes(anchors, sizes, place_labels(anchors, sizes, BOUNDS, [legend, point]))
    for b in placed:
        assert b.overlap(legend) == 0 and b.overlap(point) == 0


def test_crowded_labels_are_still_placed_least_overlapping():
    tiny = Box(0, 0, 50, 20)
    offsets = place_labels([(25, 10)] * 3, [(40, 15)] * 3, tiny)
    assert len(offsets) == 3


def test_box_overlap_and_outside():
    a = Box(0, 0, 10, 10)
    assert a.overlap(Box(5, 5, 15, 15)) == 25
    assert a.overlap(Box(10, 0, 20, 10)) == 0  # touching is not overlapping
    assert Box(-5, 0, 5, 10).outside(a) == 50
