"""Frozen records: frozen dataclasses whose methods are shared functions rather than generated code.

``@dataclass(frozen=True)`` writes the source of six to ten methods for each class and compiles it when the
module is imported: on Python 3.11 about a millisecond a class, which on the `size` path alone (35 classes)
was a third of the start-up above a bare ``import typer, rich, yaml`` (docs/startup.md). ``@frozen`` collects
the fields as ``dataclasses`` keeps them (so ``dataclasses.fields``, ``replace``, ``asdict`` and
``is_dataclass`` work as on any dataclass), then gives the class ``__init__``, ``__repr__``,
``__eq__``, ``__hash__`` (and with ``order=True`` the orderings) built from closures over its fields, and
the frozen ``__setattr__``/``__delattr__``. They behave as the generated ones do: positional or keyword
arguments, defaults and default factories, ``init=False`` fields set to their default, ``__post_init__``
called last, equality and hash over the ``compare`` fields, instances immutable.

An instance takes about twice as long to build as with a generated ``__init__`` (3.7 µs against 2.0 for five
fields, two of them given, on this project's two-core machine), which nothing on a start-up path notices; the
classes a replay makes per request stay plain dataclasses.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # type checkers read @frozen as the frozen dataclass it behaves as
    from typing import dataclass_transform
else:
    def dataclass_transform(**_):
        return lambda f: f

_MISSING = dataclasses.MISSING
_set = object.__setattr__


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def frozen(cls: type | None = None, /, *, order: bool = False):
    """The class as a frozen record (``@frozen`` or ``@frozen(order=True)``)."""
    if cls is None:
        return lambda c: _make(c, order)
    return _make(cls, order)


def _make(cls: type, order: bool) -> type:
    fields = _fields(cls)
    shown = tuple(f.name for f in fields if f.repr)
    compared = tuple(f.name for f in fields if f.compare)
    hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))

    def key(self) -> tuple:
        return tuple([getattr(self, n) for n in compared])

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({', '.join([f'{n}={getattr(self, n)!r}' for n in shown])})"

    def __eq__(self, other: Any):
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple([getattr(self, n) for n in hashed]))

    own = cls.__dict__
    if "__setattr__" in own or "__delattr__" in own:
        raise TypeError(f"{cls.__qualname__}: a frozen record defines no __setattr__ or __delattr__")
    # as dataclasses does: a method the class defines is kept; a hash it states is kept, and one Python
    # cleared because the class defines __eq__ is replaced
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    methods = {"__init__": _init(cls, fields), "__repr__": __repr__, "__eq__": __eq__,
               "__setattr__": _setattr, "__delattr__": _delattr}
    for name, fn in methods.items():
        if name not in own:
            setattr(cls, name, fn)
    if not explicit_hash:
        cls.__hash__ = __hash__
    if order:
        for name, op in _ORDERINGS.items():
            setattr(cls, name, _ordering(key, op, name))
    cls.__frozen_record__ = True
    return cls


def _fields(cls: type) -> list[dataclasses.Field]:
    """The class's fields as ``dataclasses`` keeps them (``__dataclass_fields__``, so ``fields``, ``replace`` and
    ``asdict`` read them), collected here: the bases' first, then each annotation of its own, its default or
    ``field(...)`` as written. ``dataclasses`` itself would test every annotation for ClassVar and InitVar,
    which records do not take, at a third of what it costs to make a record."""
    found: dict[str, dataclasses.Field] = {}
    for base in cls.__mro__[-1:0:-1]:
        inherited = base.__dict__.get("__dataclass_fields__")
        if inherited is not None:
            if not base.__dict__.get("__frozen_record__"):
                raise TypeError(f"{cls.__qualname__}: a frozen record cannot extend the dataclass "
                                f"{base.__qualname__}")
            found.update(inherited)
    own = cls.__dict__
    for name, kind in own.get("__annotations__", {}).items():
        text = kind if isinstance(kind, str) else getattr(kind, "__name__", "")
        if "ClassVar" in text or "InitVar" in text:
            raise TypeError(f"{cls.__qualname__}.{name}: a frozen record takes no ClassVar or InitVar")
        default = own.get(name, _MISSING)
        f = default if isinstance(default, dataclasses.Field) else dataclasses.field(default=default)
        if f.default is not _MISSING and f.default.__class__.__hash__ is None:
            raise ValueError(f"{cls.__qualname__}.{name}: mutable default {type(f.default)} is not allowed: use "
                             "default_factory")
        f.name, f.type, f._field_type = name, kind, dataclasses._FIELD  # type: ignore[attr-defined]
        if getattr(f, "kw_only", False) is _MISSING:
            f.kw_only = False
        found[name] = f
        if f.default is _MISSING:
            if isinstance(default, dataclasses.Field):
                delattr(cls, name)
        else:
            setattr(cls, name, f.default)
    fields = list(found.values())
    optional = False
    for f in fields:
        if f.init:
            if f.default is _MISSING and f.default_factory is _MISSING and optional:
                raise TypeError(f"{cls.__qualname__}: non-default argument {f.name!r} follows default argument")
            optional = optional or f.default is not _MISSING or f.default_factory is not _MISSING
    cls.__dataclass_fields__ = found
    cls.__match_args__ = tuple(f.name for f in fields if f.init)
    return fields


def _init(cls: type, fields: list[dataclasses.Field]):
    """``__init__`` over the fields: the init fields by position or keyword, the others from their default."""
    names = tuple(f.name for f in fields if f.init)
    defaults = {f.name: f.default for f in fields if f.init and f.default is not _MISSING}
    factories = {f.name: f.default_factory for f in fields if f.init and f.default_factory is not _MISSING}
    # an init=False field with a plain default is read from the class, as a generated __init__ leaves it
    made = tuple((f.name, f.default_factory) for f in fields if not f.init and f.default_factory is not _MISSING)
    post_init = getattr(cls, "__post_init__", None) is not None
    index = {n: i for i, n in enumerate(names)}
    qualname = cls.__qualname__

    def __init__(self, *args, **kwargs):
        if len(args) > len(names):
            raise TypeError(f"{qualname}.__init__() takes {len(names) + 1} positional arguments but "
                            f"{len(args) + 1} were given")
        for name, value in zip(names, args):
            _set(self, name, value)
        for name, value in kwargs.items():
            i = index.get(name)
            if i is None:
                raise TypeError(f"{qualname}.__init__() got an unexpected keyword argument {name!r}")
            if i < len(args):
                raise TypeError(f"{qualname}.__init__() got multiple values for argument {name!r}")
            _set(self, name, value)
        if len(args) + len(kwargs) < len(names):
            for name in names[len(args):]:
                if name in kwargs:
                    continue
                if name in defaults:
                    _set(self, name, defaults[name])
                elif name in factories:
                    _set(self, name, factories[name]())
                else:
                    raise TypeError(f"{qualname}.__init__() missing required argument {name!r}")
        for name, factory in made:
            _set(self, name, factory())
        if post_init:
            self.__post_init__()

    __init__.__qualname__ = f"{qualname}.__init__"
    return __init__


def _setattr(self, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


_ORDERINGS = {"__lt__": tuple.__lt__, "__le__": tuple.__le__, "__gt__": tuple.__gt__, "__ge__": tuple.__ge__}


def _ordering(key, op, name: str):
    def compare(self, other: Any):
        if other.__class__ is self.__class__:
            return op(key(self), key(other))
        return NotImplemented

    compare.__name__ = name
    return compare
