"""The core imports one way (DESIGN.md, "Load order").

Read from the source, not from an import: a module-level import is an edge, an
import inside a function is a late import. Each test fails if the old shape
comes back -- an import cycle, a module importing a higher layer, a ``_bind``
function or ``X = None`` placeholder filled in later, a core function importing
another core module at call time.
"""

from __future__ import annotations

import ast
import pathlib

import tapegrad

PACKAGE = pathlib.Path(tapegrad.__file__).parent

# The core, lowest layer first. A module may import modules of its own layer (with
# no cycle) or of a lower one; ``ops`` and ``device`` stand for their packages.
LAYERS = [
    ("errors", "grad_mode", "printing", "return_types", "walks"),  # import no tapegrad module
    ("dtypes", "device", "random", "memory_formats"),
    ("tensor",),  # the Tensor's state; its recording methods join it from the top layer
    ("args", "tape"),  # argument rules; the record and Function.apply
    ("ops",),  # every op family
    ("engine",),  # backward: replays the record, with ops.graph_backend under create_graph
    ("creation", "sparse", "torch_functions", "tensor_methods_more"),
    ("tensor_operators",),
    ("tensor_methods",),  # Tensor's methods join the class here
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}

# module-level ``X = None`` that another module sets on purpose: declared hooks, off by default
HOOKS = {
    ("tape", "_unsaved"): "set by utils.checkpoint while a checkpointed forward runs",
    ("engine", "_observe"): "set by autograd.instrument while anomaly mode or a profile is on",
    ("random", "_seed"): "restored by utils.checkpoint with the generators' state",
}
# imports inside core functions, each with its reason
LATE = {
    ("device.kernel_check", "ops"): "the kernel compile CLI imports every module that "
                                    "declares kernels, whichever they are",
}


def _modules():
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        mods[".".join(parts)] = (path, is_pkg)
    return mods


MODULES = _modules()


def _targets(mod, is_pkg, node):
    """The tapegrad modules (names relative to the package) an import statement loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = mod.split(".") if is_pkg else mod.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)] if mod else []
            base = [b for b in base if b]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
            if module != "tapegrad" and not module.startswith("tapegrad."):
                return []
            module = module[len("tapegrad."):] if module != "tapegrad" else ""
        names = []
        for alias in node.names:
            sub = f"{module}.{alias.name}" if module else alias.name
            names.append(sub if sub in MODULES else module)
        return [n for n in names if n in MODULES and n]
    out = []
    for name in names:
        if name.startswith("tapegrad."):
            name = name[len("tapegrad."):]
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name:
                out.append(name)
    return out


def _scan(mod):
    """(module-level imports, [(target, line)] of imports inside functions, tree)."""
    path, is_pkg = MODULES[mod]
    tree = ast.parse(path.read_text(), str(path))
    top, late = set(), []

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _targets(mod, is_pkg, child):
                    if target != mod:
                        if in_function:
                            late.append((target, child.lineno))
                        else:
                            top.add(target)
            walk(child, in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(tree, False)
    return top, late, tree


SCANS = {mod: _scan(mod) for mod in MODULES if mod}


def _layer(mod):
    head = mod.split(".")[0]
    return LAYER.get(mod, LAYER.get(head))


def _cycles(graph):
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_the_package_has_no_import_cycle():
    graph = {mod: top for mod, (top, _, _) in SCANS.items()}
    assert _cycles(graph) == [], "modules that import each other (at module level)"


def test_the_core_imports_one_way():
    wrong = []
    for mod, (top, _, _) in SCANS.items():
        own = _layer(mod)
        if own is None:
            continue
        for target in sorted(top):
            theirs = _layer(target)
            if theirs is None:
                wrong.append(f"{mod} imports {target}, which is not in the core")
            elif theirs > own:
                wrong.append(f"{mod} (layer {own}) imports {target} (layer {theirs})")
    assert wrong == [], "\n".join(wrong)


def test_every_core_module_has_a_layer():
    # a new module at the top of tapegrad/ joins LAYERS or is deliberately outside the core
    outside = {"__main__", "accelerator", "cuda", "hub", "serialization", "serialization_modules"}
    loose = sorted(m for m in SCANS if "." not in m and m not in outside and _layer(m) is None
                   and not MODULES[m][1])
    assert loose == [], f"put each in LAYERS (or in `outside` with a reason): {loose}"


def _placeholder_names():
    """Names a module-level ``X = None`` must not take in the core: a name that modules
    import from one another (``Tensor``, ``_wrap``, an ``_ops`` alias), or one that
    another module sets through its module (``tape._unsaved = ...``)."""
    imported, set_outside = set(), set()
    for mod, (_, _, tree) in SCANS.items():
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    imported.add(alias.asname or alias.name.rpartition(".")[2])
                    if _targets(mod, MODULES[mod][1], node):
                        aliases.add(alias.asname or alias.name.rpartition(".")[2])
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Name) and node.value.id in aliases:
                set_outside.add(node.attr)
    return imported | set_outside


def test_no_late_binding_in_the_core():
    taken = _placeholder_names()
    found = []
    for mod, (_, late, tree) in SCANS.items():
        if _layer(mod) is None:
            continue
        for target, line in late:
            if _layer(target) is not None and (mod, target) not in LATE:
                found.append(f"{mod}:{line} imports {target} inside a function")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    node.name.startswith(("_bind", "bind")):
                found.append(f"{mod}:{node.lineno} defines {node.name}")
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and \
                    isinstance(node.value, ast.Constant) and node.value.value is None:
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    if isinstance(t, ast.Name) and t.id in taken and (mod, t.id) not in HOOKS:
                        found.append(f"{mod}:{node.lineno} placeholder {t.id} = None")
    assert found == [], "\n".join(found)


def test_the_checks_find_what_they_look_for():
    """The scanner on sources with each defect, so a broken scanner cannot pass."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    top, late, _ = SCANS["tensor_methods"]
    assert {"tensor", "ops", "engine"} <= top | SCANS["tensor_operators"][0]
    assert ("ops", 310) not in late
    kernel_check_late = {t for t, _ in SCANS["device.kernel_check"][1]}
    assert "ops" in kernel_check_late
    assert _layer("ops.conv") == LAYER["ops"] and _layer("device.pool") == LAYER["device"]
    taken = _placeholder_names()
    assert {"Tensor", "_wrap", "_ops", "_unsaved", "_observe"} <= taken
    assert "_pool" not in taken  # device/pool.py's lazily made pool is its own state
