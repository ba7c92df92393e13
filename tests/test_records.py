"""hybridplan/records.py: a frozen record behaves as ``@dataclass(frozen=True)`` does, for everything the
planner does with one: building it (by position, keyword, default, factory, init=False fields, __post_init__),
comparing and hashing it, showing it, refusing to change it, and dataclasses' own fields/replace/asdict."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field

import pytest

from hybridplan.records import frozen

pytestmark = pytest.mark.unit


def _pair():
    """The same class as a record and as a frozen dataclass."""

    def body(decorate):
        @decorate
        class Shape:
            """A shape."""

            name: str
            width: int = 4
            tags: tuple = ()
            notes: list = field(default_factory=list, compare=False, repr=False)
            kind: str = field(default="box", init=False)
            seen: dict = field(default_factory=dict, init=False, compare=False)

            @property
            def area(self) -> int:
                return self.width * self.width

        return Shape

    return body(frozen), body(dataclass(frozen=True))


@pytest.mark.parametrize("args,kwargs", [(("a",), {}), (("a", 3), {}), ((), {"name": "b", "width": 2}),
                                         (("c",), {"tags": (1, 2), "notes": [1]})])
def test_a_record_is_built_compared_and_shown_as_a_frozen_dataclass(args, kwargs):
    Rec, Dc = _pair()
    r, d = Rec(*args, **kwargs), Dc(*args, **kwargs)
    assert dataclasses.asdict(r) == dataclasses.asdict(d)
    assert repr(r) == repr(d)
    assert hash(r) == hash(d)
    assert r == Rec(*args, **kwargs) and r != d  # equal to its own kind only, as a dataclass is
    assert r.kind == "box" and r.area == d.area
    assert [f.name for f in dataclasses.fields(r)] == [f.name for f in dataclasses.fields(d)]
    moved = dataclasses.replace(r, width=9)
    assert moved.width == 9 and dataclasses.asdict(moved) == dataclasses.asdict(dataclasses.replace(d, width=9))
    assert Rec.__match_args__ == Dc.__match_args__
    assert copy.deepcopy(r) == r and copy.copy(r) == r


def test_a_record_refuses_what_a_frozen_dataclass_refuses():
    Rec, Dc = _pair()
    for cls in (Rec, Dc):
        with pytest.raises(TypeError):
            cls()  # the required field missing
        with pytest.raises(TypeError):
            cls("a", 1, (), [], "extra")
        with pytest.raises(TypeError):
            cls("a", name="b")
        with pytest.raises(TypeError):
            cls("a", colour="red")
        with pytest.raises(TypeError):
            cls("a", kind="round")  # an init=False field
        obj = cls("a")
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.width = 5  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            del obj.width
        with pytest.raises(ValueError):
            dataclasses.replace(obj, kind="round")
    r1, r2 = Rec("a", notes=[1]), Rec("a", notes=[2])
    assert r1 == r2 and hash(r1) == hash(r2)  # notes are compare=False
    assert Rec("a").seen is not Rec("a").seen  # a factory per instance


def test_post_init_ordering_inheritance_and_bad_declarations():
    @frozen(order=True)
    class Version:
        major: int
        minor: int = 0

        def __post_init__(self):
            if self.major < 0:
                raise ValueError("negative")

    @dataclass(frozen=True, order=True)
    class Reference:
        major: int
        minor: int = 0

    pairs = [(Version(0, 10), Version(0, 9)), (Version(1), Version(0, 33)), (Version(0, 1), Version(0, 1))]
    for a, b in pairs:
        x, y = Reference(a.major, a.minor), Reference(b.major, b.minor)
        assert (a < b, a <= b, a > b, a >= b) == (x < y, x <= y, x > y, x >= y)
    assert sorted([Version(0, 9), Version(0, 1)]) == [Version(0, 1), Version(0, 9)]
    with pytest.raises(ValueError):
        Version(-1)

    @frozen
    class Wide(Version):
        patch: int = 0

    assert [f.name for f in dataclasses.fields(Wide)] == ["major", "minor", "patch"]
    assert Wide(0, 1, 2) != Version(0, 1) and Wide(0, 1, 2).patch == 2

    with pytest.raises(TypeError):
        @frozen
        class Misordered:
            a: int = 1
            b: int

    with pytest.raises(ValueError):
        @frozen
        class Mutable:
            a: list = []  # noqa: RUF012

    with pytest.raises(TypeError):
        @frozen
        class OverDataclass(Reference):
            extra: int = 0


def test_every_planner_record_is_a_frozen_dataclass_by_dataclasses_own_test():
    # the records the size path builds: dataclasses' own functions see them as frozen dataclasses' fields
    from hybridplan.loader import load_model
    from hybridplan.scenario import Scenario

    sc = Scenario(load_model("nemotron-h"), ctx=4096)
    assert dataclasses.is_dataclass(sc) and dataclasses.replace(sc, ctx=8192).ctx == 8192
    assert dataclasses.asdict(sc.spec)["name"] == "nemotron-h-8b"
    with pytest.raises(dataclasses.FrozenInstanceError):
        sc.ctx = 1  # type: ignore[misc]
