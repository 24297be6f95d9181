"""Where a scenario comes from: the file (a built-in name or a path) read as
YAML with the line of each key, the command line's ``--set``, ``--store``
and ``--store-option`` applied to it, and where an error points (the flag
that set a key, else the key's line)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from storebench.errors import UserError
from storebench.stores.base import engine_names

BUILTIN_PACKAGE = "storebench.scenarios"


# --- YAML with line numbers ----------------------------------------------------


MAX_NODES = 100_000  # a scenario is a page of YAML; more is an alias bomb
Lines = dict[tuple[Any, ...], int]  # a key's path (("stores", 0, "url"), say) -> its line


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many nodes ``node`` stands for with every alias expanded,
    counted once per distinct node (so in linear time); a node that
    contains itself counts as too many."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = MAX_NODES + 1  # until counted: a cycle is too many
    children = node.value if isinstance(node, yaml.SequenceNode) else []
    if isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    sizes[id(node)] = min(MAX_NODES + 1, 1 + sum(_expanded_size(c, sizes) for c in children))
    return sizes[id(node)]


def _line_map(
    node: yaml.Node, source: Path, path: tuple[Any, ...] = (), out: Lines | None = None
) -> Lines:
    """Each key's line; a key given twice in a mapping is an error at its
    second line (YAML would keep the last one silently)."""
    out = {} if out is None else out
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for k, v in node.value:
            key = k.value
            if isinstance(key, str) and key != "<<":
                if key in seen:
                    raise UserError(
                        f"{dotted((*path, key))}: given twice (YAML keeps only the last)",
                        where=f"{source}:{k.start_mark.line + 1}",
                    )
                seen.add(key)
            _line_map(v, source, (*path, key), out)
            out[(*path, key)] = k.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _line_map(v, source, (*path, i), out)
    return out


def _compose(text: str, source: Path) -> tuple[Any, yaml.Node | None]:
    """The document and its node tree, refused before it is built when its
    aliases expand it beyond ``MAX_NODES``."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None and _expanded_size(node, {}) > MAX_NODES:
            raise UserError(
                f"expands to more than {MAX_NODES:,} values (YAML aliases)", where=str(source)
            )
        return (loader.construct_document(node) if node is not None else None), node
    finally:
        loader.dispose()


def _line_for(lines: Lines, loc: tuple[Any, ...]) -> int | None:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def first_error(exc: ValidationError) -> tuple[tuple[Any, ...], str]:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif "input" in err and not isinstance(err["input"], dict | list):
        msg = f"{msg} (got {err['input']!r})"
    return loc, msg


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):  # its str() spans two lines
        char = exc.character
        return f"character {f'#x{char:04x}' if isinstance(char, int) else repr(char)} not allowed"
    return str(getattr(exc, "problem", None) or exc)


def _yaml_where(path: Path, text: str, exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        return f"{path}:{text.count(chr(10), 0, exc.position) + 1}"
    mark = getattr(exc, "problem_mark", None)
    return f"{path}:{mark.line + 1}" if mark else str(path)


def dotted(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc)


# --- loading ---------------------------------------------------------------------


def builtin_names() -> list[str]:
    return sorted(
        p.name[:-5] for p in resources.files(BUILTIN_PACKAGE).iterdir() if p.name.endswith(".yaml")
    )


def resolve(name_or_path: str) -> Path:
    p = Path(name_or_path)
    try:
        if p.suffix in (".yaml", ".yml") or p.exists():
            if not p.is_file():
                raise UserError("scenario file not found", where=str(p))
            return p
    except OSError as exc:  # a name the system refuses: too long, ...
        raise UserError(f"not a usable path ({exc.strerror})", where=str(p)) from None
    if name_or_path in builtin_names():
        return Path(str(resources.files(BUILTIN_PACKAGE) / f"{name_or_path}.yaml"))
    raise UserError(
        f"unknown scenario {name_or_path!r} (built-in: {', '.join(builtin_names())}; or give a .yaml path)",
        where="scenario",
    )


def parse_set(items: list[str]) -> list[tuple[list[str], Any]]:
    out = []
    for item in items:
        if "=" not in item:
            raise UserError(f"expected key=value, got {item!r}", where="--set")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw else ""
        except (yaml.YAMLError, RecursionError, ValueError) as exc:
            raise UserError(f"cannot read value {raw!r}", where=f"--set {key}") from exc
        out.append((key.strip().split("."), value))
    return out


def parse_stores(texts: list[str]) -> list[dict[str, Any]]:
    """``--store`` values: ``ENGINE``, ``ENGINE=URL``, or ``A,B,C``."""
    out: list[dict[str, Any]] = []
    for text in texts:
        engine, _, url = text.partition("=")
        if url:
            out.append({"engine": engine.strip(), "url": url})
        else:
            out += [{"engine": e.strip(), "url": None} for e in engine.split(",") if e.strip()]
    return out


def set_store_options(raw: dict[str, Any], items: list[str]) -> dict[str, str]:
    """``ENGINE.KEY[.SUB]=VALUE`` texts (values read as YAML) into the
    options of each of ``raw``'s stores of that engine (``KEY=VALUE`` when
    there is one engine); returns where each came from, for messages. The
    store checks them with the plan."""
    stores = raw.get("stores")
    if not isinstance(stores, list):
        raise UserError("the scenario names no stores to set options of", where="--store-option")
    stores[:] = [{"engine": s} if isinstance(s, str) else s for s in stores]
    engines = [s.get("engine") for s in stores if isinstance(s, dict)]
    flags: dict[str, str] = {}
    for keys, value in parse_set(items):
        if keys[0] in engines and len(keys) > 1:
            engine, path = keys[0], keys[1:]
        elif keys[0] in engine_names() and len(keys) > 1:
            raise UserError(
                f"{'.'.join(keys)}: no {keys[0]} store in this run "
                f"(stores: {', '.join(map(str, engines))})",
                where="--store-option",
            )
        elif len(set(engines)) == 1:
            engine, path = engines[0], keys
        else:
            raise UserError(
                f"{'.'.join(keys)}: start with the store's engine "
                f"({' or '.join(sorted(set(map(str, engines))))}), e.g. ENGINE.KEY=VALUE",
                where="--store-option",
            )
        for i, entry in enumerate(stores):
            if not isinstance(entry, dict) or entry.get("engine") != engine:
                continue
            target = entry.setdefault("options", {})
            for k in path[:-1]:
                if not isinstance(target, dict):
                    break
                target = target.setdefault(k, {})
            if not isinstance(target, dict):
                raise UserError(f"{'.'.join(keys)}: not a mapping", where="--store-option")
            target[path[-1]] = value
            flags[f"stores.{i}.options.{path[0]}"] = f"--store-option {engine}.{path[0]}"
    return flags


def read(
    name_or_path: str,
    sets: list[str],
    stores: list[str],
    values: dict[str, Any] | None,
    store_options: list[str],
    top: set[str],
) -> tuple[Path, dict[str, Any], Lines, dict[str, str], frozenset[str]]:
    """The scenario's file with the overrides applied (``Scenario.load``
    says what each is; ``top``: the file's top-level keys, a key set
    without one is a workload parameter): its path, the raw mapping, each
    key's line, where each override came from (dotted key -> flag), and the
    workload parameters the file itself states."""
    path = resolve(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
        raw, node = _compose(text, path)
    except OSError as exc:
        raise UserError(f"cannot read: {exc.strerror}", where=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"not UTF-8 text (byte {exc.start})", where=str(path)) from exc
    except yaml.YAMLError as exc:
        raise UserError(
            f"not valid YAML: {_yaml_problem(exc)}", where=_yaml_where(path, text, exc)
        ) from exc
    except RecursionError:
        raise UserError("not valid YAML: nested too deeply", where=str(path)) from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise UserError(f"not valid YAML: {exc}".split(";")[0], where=str(path)) from None
    if not isinstance(raw, dict):
        raise UserError("a scenario must be a YAML mapping", where=str(path))
    lines = _line_map(node, path) if node is not None else {}
    in_file = raw.get("params")
    file_keys = frozenset(in_file if isinstance(in_file, dict) else ())
    overrides: dict[str, str] = {}
    for k in values or {}:
        if not isinstance(k, str):
            raise UserError(f"keys are dotted names (strings), got {k!r}", where="--set")
    typed = [(k.strip().split("."), v) for k, v in (values or {}).items()]
    for keys, value in [*parse_set(list(sets)), *typed]:
        if keys[0] not in top:
            keys = ["params", *keys]
        if keys[0] == "grid" and len(keys) > 2:  # grid keys hold dots: grid.index.m
            keys = ["grid", ".".join(keys[1:])]
        target = raw
        for k in keys[:-1]:
            nxt = target.setdefault(k, {})
            if not isinstance(nxt, dict):
                raise UserError(f"{'.'.join(keys)}: {k} is not a mapping", where="--set")
            target = nxt
        target[keys[-1]] = value
        overrides[".".join(keys)] = f"--set {'.'.join(keys)}"
        if keys[0] == "params" and len(keys) > 1 and isinstance(raw.get("grid"), dict):
            # a value set for a gridded parameter replaces its grid axis
            for gk in (keys[1], ".".join(keys)):
                raw["grid"].pop(gk, None)
    if stores:
        raw["stores"] = parse_stores(list(stores))
        overrides["stores"] = "--store"
    if store_options:
        # before "--store": an option's error names its own flag
        overrides = set_store_options(raw, list(store_options)) | overrides
    return path, raw, lines, overrides, file_keys


def error(
    path: Path, lines: Lines, overrides: dict[str, str], loc: tuple[Any, ...], msg: str
) -> UserError:
    """An error at key ``loc``, pointing at the flag that set it (which names
    the key already), else at the key's line."""
    at = where(path, lines, overrides, loc)
    return UserError(msg if at.startswith("--") or not loc else f"{dotted(loc)}: {msg}", where=at)


def where(path: Path, lines: Lines, overrides: dict[str, str], loc: tuple[Any, ...]) -> str:
    """What an error at key ``loc`` points at: the flag that set it, else its line."""
    key = dotted(loc)
    # the most specific flag: `--set grid.x=..` after `--set grid={}` wrote x
    setters = [k for k in overrides if key == k or key.startswith(k + ".")]
    if setters:
        return overrides[max(setters, key=len)]
    line = _line_for(lines, loc)
    return f"{path}:{line}" if line else str(path)
