"""Nothing from a file becomes code, and the runtimes mean what eager PyTorch means.

Each test builds a hostile or tricky Program IN MEMORY and hands it to the runtime
directly, without the load-time checker: the runtimes themselves must be safe, so that a
rule the checker misses never turns a file's strings into running code. A payload that
ran would set an environment variable (the tests look for it) rather than do harm.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
import threading

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.api import TracedFunction, TracedMethod, TracedModule
from tracebridge.errors import GuardError
from tracebridge.ir import Node, Ref
from tracebridge.runtime import Method

MARK = "TB_INJECTED"
RUNTIMES = ("codegen", "interpreter")


def payload(tag: str) -> str:
    """Python that, if it ever ran, would leave a mark (no '/': locs are cut at it)."""
    return f"__import__('os').environ.__setitem__('{MARK}', '{tag}')"


@pytest.fixture(autouse=True)
def _runtime_alone(unchecked_programs):
    """These tests show the runtime safe on its own: the programs they build in memory skip
    the suite's load-time checker (which refuses most of them)."""
    yield


@pytest.fixture(autouse=True)
def _no_mark():
    os.environ.pop(MARK, None)
    yield
    leaked = os.environ.pop(MARK, None)
    assert leaked is None, f"code from the file ran (payload {leaked!r})"


def _traced(fn, *inputs, **kw) -> TracedFunction:
    return tracebridge.trace(fn, inputs, check_trace=False, **kw)


def _method(program, name="forward", runtime="codegen", slots=None) -> Method:
    if slots is None:
        slots = {k: ({k: e.tensor}, k) for k, e in program.state.items()}
    return Method(name, program.methods[name], slots, runtime)


def _exercise(method: Method, *inputs):
    """Generate, show and call: every path by which file text could reach code."""
    with contextlib.suppress(Exception):
        method.code  # noqa: B018 - reading .code generated code in the old runtime
    with contextlib.suppress(Exception):
        return method(*inputs)


# --- strings from the file ------------------------------------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_newline_in_loc_is_not_code(runtime):
    f = _traced(lambda x: torch.neg(x) + 1, torch.rand(3))
    program = copy.deepcopy(f.program)
    for node in program.methods["forward"].nodes:
        node.loc = f"x.py:1\n    {payload('loc')}\n    pass  #"
    method = _method(program, runtime=runtime)
    x = torch.rand(3)
    assert torch.equal(method(x), -x + 1)
    code = method.code
    assert "__import__" not in code.replace("\\n", "") or "\n    __import__" not in code


def test_loc_shown_escaped_in_code():
    f = _traced(lambda x: torch.neg(x), torch.rand(3))
    program = copy.deepcopy(f.program)
    program.methods["forward"].nodes[0].loc = "x.py:1\nimport os"
    code = _method(program).code
    lines = code.splitlines()
    assert not any(line.startswith("import os") for line in lines)
    assert "\\n" in code  # the newline is shown, escaped, inside the comment


def _rename_state(program, old: str, new: str) -> None:
    program.state = {new if k == old else k: v for k, v in program.state.items()}
    for graph in program.methods.values():
        for node in graph.nodes:
            if node.op == "prim.state" and node.args[0] == old:
                node.args[0] = new


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_state_name_is_not_code(runtime):
    w = torch.rand(3)
    f = _traced(lambda x: x * w, torch.rand(3))
    program = copy.deepcopy(f.program)
    (old,) = program.state
    evil = f"w\n{payload('state')}\ndef _():  #"
    _rename_state(program, old, evil)
    traced = TracedFunction(program, runtime=runtime)
    x = torch.rand(3)
    with contextlib.suppress(Exception):
        traced.code  # noqa: B018 - the old runtime ran the payload here
    assert torch.equal(traced(x), x * w)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_kwargs_key_is_not_code(runtime):
    f = _traced(lambda x: torch.sum(x, dim=0), torch.rand(2, 3))
    program = copy.deepcopy(f.program)
    (node,) = [n for n in program.methods["forward"].nodes if n.op.endswith("sum")]
    node.kwargs = {f"dim={payload('kwargs')} or 0, keepdim": False}
    _exercise(_method(program, runtime=runtime), torch.rand(2, 3))


def test_odd_kwargs_key_is_passed_as_data():
    """A key that is not an identifier reaches the op as a string, not as syntax."""
    f = _traced(lambda x: torch.sum(x, dim=0), torch.rand(2, 3))
    program = copy.deepcopy(f.program)
    (node,) = [n for n in program.methods["forward"].nodes if n.op.endswith("sum")]
    node.kwargs = {"dim)": 0}
    with pytest.raises(tracebridge.TraceError, match="dim\\)") as info:
        _method(program)(torch.rand(2, 3))
    assert isinstance(info.value.__cause__, TypeError)


def _evil_dispatch_module(name: str) -> TracedModule:
    net = nn.Linear(3, 2)
    traced = tracebridge.trace(net, torch.rand(4, 3), check_trace=False)
    program = copy.deepcopy(traced.program)
    graph = program.methods.pop("forward")
    program.methods[name] = graph
    program.dispatch = {"forward": {"train": name, "eval": name}}
    return TracedModule(program), net


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_method_name_is_not_code(runtime):
    evil = f"forward(*a):\n    {payload('method')}\ndef f"
    module, net = _evil_dispatch_module(evil)
    module._methods[evil].runtime = runtime
    x = torch.rand(4, 3)
    with torch.no_grad():
        assert torch.allclose(module(x), net(x))
        code = module.code
    assert not any(line.startswith("    __import__") for line in code.splitlines())


def test_method_named_eval_keeps_module_eval():
    net = nn.Linear(3, 3)
    traced = tracebridge.trace_module(net, {"forward": torch.rand(4, 3)}, check_trace=False)
    program = copy.deepcopy(traced.program)
    program.methods["eval"] = program.methods["forward"]
    program.methods["train"] = program.methods["forward"]
    program.training = True
    module = TracedModule(program)
    assert module.eval() is module
    assert module.training is False
    assert module.train() is module and module.training
    assert "eval" in module.methods  # still there, reached by name
    x = torch.ones(4, 3)
    with torch.no_grad():
        assert torch.equal(TracedMethod(module, "eval")(x), net(x))


def test_traced_methods_reached_by_name():
    class Two(nn.Module):
        def forward(self, x):
            return x + 1

        def encode(self, x):
            return x * 2

    m = tracebridge.trace_module(
        Two(), {"forward": torch.rand(3), "encode": torch.rand(3)}, check_trace=False
    )
    x = torch.rand(3)
    assert torch.equal(m.encode(x), x * 2)
    assert m.encode.graph.startswith("graph encode(")


# --- names the generated code uses ----------------------------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", ["v{}", "getattr", "_KIND", "op_add", "torch", "_graph", "in0"])
def test_input_names_change_nothing(name, runtime):
    def fn(x, y):
        a = torch.neg(x)
        b = torch.add(x, y)
        return a * b, x

    x, y = torch.rand(3), torch.rand(3)
    f = _traced(fn, x, y)
    program = copy.deepcopy(f.program)
    graph = program.methods["forward"]
    first_output = graph.nodes[0].outputs[0].id
    graph.inputs[0].name = name.format(first_output)
    graph.inputs[1].name = "in0" if name != "in0" else "x"
    method = _method(program, runtime=runtime)
    got = method(x, y)
    want = fn(x, y)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


# --- precedence -----------------------------------------------------------------------


PRECEDENCE_CASES = [
    lambda x: x * ((-2) ** x.shape[0]),
    lambda x: x * (-(x.shape[0] ** 2)),
    lambda x: x * ((-x.shape[0]) ** 2),
    lambda x: x * (2 ** (-x.shape[0])),
    lambda x: x * ((x.shape[0] - 3) ** 2),
    lambda x: x * (x.shape[0] - (3 - x.shape[1])),
    lambda x: x * ((x.shape[0] // -2) % 3),
    lambda x: x * (-(3 ** x.shape[0]) // 2 ** x.shape[1]),
    lambda x: x * ((-3) ** x.shape[0] - -((2**2) ** x.shape[1])),
]


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("case", range(len(PRECEDENCE_CASES)))
def test_precedence_as_eager(case, runtime, tmp_path):
    fn = PRECEDENCE_CASES[case]
    x = torch.ones(2, 5)
    f = _traced(fn, x, runtime=runtime)
    assert torch.equal(f(x), fn(x))
    path = tmp_path / "p.tb"
    f.save(path)
    loaded = tracebridge.load(path, runtime=runtime)
    for y in (x, torch.ones(3, 4)):
        assert torch.equal(loaded(y), fn(y))


# --- guard messages never read the loading machine's files ----------------------------


def _guarded_program(loc: str):
    def fn(x):
        if x.shape[0] == 2:
            return x + 1
        return x - 1

    f = _traced(fn, torch.rand(2))
    program = copy.deepcopy(f.program)
    for node in program.methods["forward"].nodes:
        node.loc = loc
    return program


class _Opens:
    """Every file the process opens while active (an audit hook cannot be removed, so
    one hook for the session, switched on and off)."""

    active = False
    seen: list = []
    installed = False

    @classmethod
    def hook(cls, event, args):
        if cls.active and event == "open":
            cls.seen.append(str(args[0]))

    @classmethod
    @contextlib.contextmanager
    def watch(cls):
        if not cls.installed:
            sys.addaudithook(cls.hook)
            cls.installed = True
        cls.seen = []
        cls.active = True
        try:
            yield cls.seen
        finally:
            cls.active = False


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("path", ["/etc/passwd", "/dev/zero", "/proc/self/environ"])
def test_guard_message_reads_no_file(path, runtime):
    program = _guarded_program(f"{path}:1")
    method = _method(program, runtime=runtime)
    method(torch.rand(2))  # compile first: only the failing call is watched
    with _Opens.watch() as opened, pytest.raises(GuardError) as info:
        method(torch.rand(3))
    assert not [p for p in opened if p == path or p.startswith(("/etc", "/dev", "/proc"))]
    assert "root:" not in str(info.value)
    assert path in str(info.value)  # the location is still named


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_guard_message_does_not_hang_on_a_pipe(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    method = _method(_guarded_program(f"{fifo}:1"))
    method(torch.rand(2))
    outcome = []

    def call():
        try:
            method(torch.rand(3))
        except GuardError as e:
            outcome.append(e)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():  # free the old code's blocked open() so the test can end
        with open(fifo, "w"):
            pass
        pytest.fail("a guard message opened a named pipe named in the file")
    assert outcome and str(fifo) in str(outcome[0])


def test_guard_message_quotes_line_stored_at_trace_time(tmp_path):
    """The line comes from the artifact: it is there after the source file is gone."""
    src = tmp_path / "usercode.py"
    src.write_text(
        "def f(x):\n"
        "    if x.shape[0] == 2:  # the decision\n"
        "        return x + 1\n"
        "    return x - 1\n"
    )
    namespace: dict = {}
    exec(compile(src.read_text(), str(src), "exec"), namespace)  # noqa: S102 - test code
    import linecache

    linecache.checkcache(str(src))
    f = tracebridge.trace(namespace["f"], torch.rand(2))
    path = tmp_path / "f.tb"
    f.save(path)
    src.unlink()
    linecache.clearcache()
    for runtime in RUNTIMES:
        loaded = tracebridge.load(path, runtime=runtime)
        with pytest.raises(GuardError) as info:
            loaded(torch.rand(3))
        message = str(info.value)
        assert "usercode.py:2" in message
        assert "if x.shape[0] == 2:  # the decision" in message


def test_old_file_without_sources_still_explains_guards():
    program = _guarded_program("gone.py:7")
    for graph in program.methods.values():
        graph.sources = {}
    with pytest.raises(GuardError, match="gone.py:7"):
        _method(program)(torch.rand(3))


# --- undefined values are a clear error, not a KeyError -------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_undefined_value_is_a_trace_error(runtime):
    f = _traced(lambda x: torch.neg(x), torch.rand(3))
    program = copy.deepcopy(f.program)
    node = program.methods["forward"].nodes[0]
    node.args = [Ref(999)]
    with pytest.raises(tracebridge.TraceError, match="999"):
        _method(program, runtime=runtime)(torch.rand(3))


def test_code_is_not_compiled_from_text(monkeypatch):
    """Generated functions are compiled from an AST: no source text reaches compile()."""
    import builtins

    compiled = []
    real = builtins.compile

    def spy(source, filename, *args, **kwargs):
        if str(filename).startswith("<tracebridge"):
            compiled.append(type(source).__name__)
        return real(source, filename, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", spy)
    f = _traced(lambda x: torch.neg(x) * x.shape[0], torch.rand(3))
    f(torch.rand(3))
    assert compiled and all(kind == "Module" for kind in compiled)


def test_guard_node_unchanged_in_generated_code():
    """A guard's ``expect`` literal from the file is data: a string stays a string."""
    f = _traced(lambda x: torch.neg(x), torch.rand(3))
    program = copy.deepcopy(f.program)
    graph = program.methods["forward"]
    graph.nodes.append(
        Node(
            op="prim.guard",
            args=[f"1 or {payload('expect')}"],
            kwargs={"expect": f"0) or ({payload('expect')}", "what": "w", "kind": "value"},
        )
    )
    for runtime in RUNTIMES:
        with pytest.raises(GuardError):
            _method(program, runtime=runtime)(torch.rand(3))


def test_traceback_through_generated_code_names_the_users_line():
    """Tracebacks show the line of ``.code`` that failed, with the traced source location."""
    import traceback

    f = _traced(lambda x, w: torch.matmul(x, w), torch.rand(2, 3), torch.rand(3, 4))
    with pytest.raises(tracebridge.TraceError) as info:
        f(torch.rand(2, 3), torch.rand(5, 4))
    assert "at matmul, " in str(info.value)  # the op's error says which op and where
    assert "test_security_codegen.py:" in str(info.value)
    cause = info.value.__cause__
    frames = [
        fr for fr in traceback.extract_tb(cause.__traceback__) if "tracebridge:" in fr.filename
    ]
    assert frames and "# matmul, test_security_codegen.py:" in frames[-1].line


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_malformed_guard_is_an_artifact_error(runtime):
    program = _guarded_program("x.py:1")
    guard = next(n for n in program.methods["forward"].nodes if n.op == "prim.guard")
    guard.args = []
    with pytest.raises(tracebridge.ArtifactError, match="prim.guard"):
        _method(program, runtime=runtime)(torch.rand(2))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_squaring_a_size_is_bounded_in_both_runtimes(runtime):
    """``n = n * n`` doubles the bits of ``n`` each time: 40 squarings of a size of 2 would
    need 2**40 bits. Both runtimes stop at the int64 range with a tracebridge error, where
    generated code that wrote ``*`` inline would run until memory ran out."""

    def f(x):
        n = x.size(0)
        for _ in range(40):
            n = n * n
        return x + n

    traced = tracebridge.trace(f, torch.zeros(1), check_trace=False, runtime=runtime)
    assert torch.equal(traced(torch.zeros(1)), torch.ones(1))
    with pytest.raises(tracebridge.TraceError, match="outside"):
        traced(torch.zeros(2))
