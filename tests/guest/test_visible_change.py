"""What counts as a visible change: groups of nearby changes, each judged by its own box."""

from __future__ import annotations

from collections.abc import Callable

from PIL import Image, ImageDraw

from cubicle_guest.changes import changed_rects, is_visible, pixel_changes
from cubicle_guest.geometry import Rect, clusters, largest_cluster
from cubicle_guest.protocol import VISIBLE_CHANGE_AREA


def _screen() -> Image.Image:
    return Image.new("RGB", (1280, 800), (255, 255, 255))


def test_a_blinking_caret_and_a_turning_clock_far_apart_are_not_a_visible_change() -> None:
    before, after = _screen(), _screen()
    ImageDraw.Draw(before).rectangle((195, 51, 196, 68), fill=(0, 0, 0))  # caret shown, then not
    ImageDraw.Draw(after).rectangle((1240, 775, 1250, 787), fill=(0, 0, 0))  # a clock digit
    rects = changed_rects(before, after)
    assert rects and not is_visible(rects)
    # one box around both would have been ~780,000 px²: the old rule called this stale
    box = rects[0]
    for rect in rects[1:]:
        box = box.union(rect)
    assert box.area > 700_000


def test_a_typed_word_is_one_visible_change_even_with_gaps_between_letters() -> None:
    before, after = _screen(), _screen()
    draw = ImageDraw.Draw(after)
    for index in range(6):  # six 7x12 glyphs, 3 px apart: each alone is under the threshold
        draw.rectangle((100 + index * 10, 50, 106 + index * 10, 61), fill=(0, 0, 0))
    rects = changed_rects(before, after)
    assert all(r.area <= VISIBLE_CHANGE_AREA for r in rects)
    assert is_visible(rects)
    largest = largest_cluster(rects)
    assert largest == Rect(100, 50, 57, 12)


def test_identical_images_have_no_change_and_offsets_map_to_the_screen() -> None:
    assert changed_rects(_screen(), _screen()) == []
    before, after = Image.new("RGB", (64, 64)), Image.new("RGB", (64, 64))
    ImageDraw.Draw(after).point((40, 3), fill=(9, 9, 9))
    assert changed_rects(before, after, offset=(100, 200)) == [Rect(140, 203, 1, 1)]


def test_clusters_merge_chains_in_any_order() -> None:
    chain = [Rect(0, 0, 10, 10), Rect(80, 0, 10, 10), Rect(40, 0, 10, 10)]
    assert clusters(chain, gap=32) == [Rect(0, 0, 90, 10)]
    assert len(clusters(chain, gap=5)) == 3
    assert largest_cluster([]) is None


def _grabber(image: Image.Image) -> Callable[[Rect], Image.Image]:
    def grab(rect: Rect) -> Image.Image:
        return image.crop((rect.x, rect.y, rect.x + rect.width, rect.y + rect.height))

    return grab


PANEL_DAMAGE = [Rect(0, 760, 1280, 40), Rect(0, 760, 1280, 40)]
"""What tint2 reports when its clock turns a minute (measured with python-xlib DAMAGE)."""


def test_damage_over_identical_pixels_is_no_change() -> None:
    before = _screen()
    ImageDraw.Draw(before).rectangle((0, 760, 1279, 799), fill=(32, 36, 44))
    assert pixel_changes(before, _grabber(before.copy()), PANEL_DAMAGE) == (
        False,
        None,
    )


def test_a_clock_digit_inside_a_repainted_panel_is_its_own_small_box() -> None:
    before = _screen()
    ImageDraw.Draw(before).rectangle((0, 760, 1279, 799), fill=(32, 36, 44))
    after = before.copy()
    ImageDraw.Draw(after).rectangle((1258, 774, 1267, 784), fill=(236, 239, 244))  # 10x11
    assert pixel_changes(before, _grabber(after), PANEL_DAMAGE) == (
        False,
        Rect(1258, 774, 10, 11),
    )
    # two small changes at both ends of one damaged strip are still two small changes
    ImageDraw.Draw(after).rectangle((10, 774, 19, 784), fill=(236, 239, 244))
    visible, box = pixel_changes(before, _grabber(after), PANEL_DAMAGE)
    assert not visible and box == Rect(10, 774, 1258, 11)


def test_pixel_changes_agree_with_changed_rects_on_dense_and_sparse_changes() -> None:
    before = _screen()
    for draw_change in (
        lambda draw: draw.rectangle((300, 200, 799, 599), fill=(200, 0, 0)),  # a dialog
        lambda draw: [  # a typed word: sparse glyphs, no dense cell
            draw.rectangle((101 + i * 10, 50, 101 + i * 10, 61), fill=(0, 0, 0)) for i in range(6)
        ],
    ):
        after = before.copy()
        draw_change(ImageDraw.Draw(after))
        rects = changed_rects(before, after)
        visible, box = pixel_changes(before, _grabber(after), [Rect(0, 0, 1280, 800)])
        assert visible is is_visible(rects) is True
        assert box == clusters(rects)[0]


def test_the_intersection_of_two_rectangles_is_their_overlap_or_none() -> None:
    screen = Rect(0, 0, 1280, 800)
    assert Rect(1200, 760, 200, 100).intersection(screen) == Rect(1200, 760, 80, 40)
    assert Rect(-10, 5, 20, 20).intersection(screen) == Rect(0, 5, 10, 20)
    assert screen.intersection(Rect(1280, 0, 10, 10)) is None  # touching edges: no overlap
    assert Rect(5, 5, 1, 1).intersection(screen) == Rect(5, 5, 1, 1)
