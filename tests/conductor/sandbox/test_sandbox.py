"""The sandbox contains hostile programs: each ends as a failed run (or failed verdict) with the
reason, nothing escapes the guarantees the detected isolation mode claims, and the test process
survives. Guarantees that depend on the mode are asserted when the mode claims them."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from conductor.domain.problem import Problem
from conductor.sandbox import SandboxLimits, detect_isolation, run_python
from reward_pipeline.verifiers.code_exec import CodeVerifier

FAST = SandboxLimits(wall_time_s=5.0, memory_bytes=256 << 20, max_processes=32)
# A tiny task the hostile code is "solving": the tests only pass if f() == 1 gets defined.
TASK = Problem(question="Write f() returning 1.", kind="code", tests="assert f() == 1")


def hostile(code: str, *, limits: SandboxLimits = FAST):
    """A verdict for ``code`` followed by a correct f(), so only the hostile part can fail it."""
    answer = textwrap.dedent(code) + "\n\ndef f():\n    return 1\n"
    return CodeVerifier(limits=limits).verify(answer, TASK)


def pids_of_uid(uid: int) -> list[int]:
    """Live (non-zombie) processes owned by ``uid``; zombies await reaping by init and run nothing."""
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    state = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z":
                        out.append(int(entry.name))
            except OSError:
                pass
    return out


@pytest.fixture(scope="module")
def iso():
    return detect_isolation()


def test_isolation_report_is_consistent(iso):
    assert iso.mode in ("namespaces", "user-namespaces", "rlimits")
    assert iso.python and iso.python_version
    if os.geteuid() == 0 and iso.mode == "namespaces":
        # As root with unshare available we expect (and the probe confirmed) the full set.
        assert iso.network and iso.pid_namespace and iso.private_tmp and iso.drops_uid


def test_a_good_program_passes_and_records_its_isolation(iso):
    v = hostile("")
    assert v.correct, v.reason
    assert v.details["isolation"]["mode"] == iso.mode
    assert v.details["isolation"]["network"] == iso.network
    assert v.details["exit_code"] == 0


def test_infinite_loop_times_out_and_is_killed():
    start = time.monotonic()
    v = hostile("while True:\n    pass", limits=SandboxLimits(wall_time_s=1.5, cpu_time_s=30))
    assert time.monotonic() - start < 10
    assert not v.correct
    assert v.reason.startswith("timeout after 1.5s")
    assert v.details["timed_out"] and v.details["limit_hit"] == "wall_time"


def test_cpu_limit_stops_a_spinning_program_before_the_wall_clock():
    res = run_python("while True:\n    pass", limits=SandboxLimits(wall_time_s=20.0, cpu_time_s=1))
    assert not res.ok and not res.timed_out
    assert res.signal == signal.SIGXCPU and res.limit_hit == "cpu_time"
    assert res.duration_s < 10


def test_memory_bomb_hits_the_address_space_limit():
    v = hostile("hog = []\nwhile True:\n    hog.append(bytearray(16 << 20))")
    assert not v.correct
    assert "MemoryError" in v.reason and "memory limit" in v.reason
    assert v.details["limit_hit"] == "memory"


def test_fork_bomb_is_capped_and_leaves_no_process_behind(iso):
    v = hostile(
        """
        import os
        while True:
            os.fork()
        """
    )
    assert not v.correct
    assert v.details["limit_hit"] == "processes", v.details["stderr_tail"]
    assert "BlockingIOError" in v.reason or "Resource temporarily unavailable" in v.reason
    uid = v.details["sandbox_uid"]
    if iso.drops_uid:
        deadline = time.monotonic() + 5
        while pids_of_uid(uid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pids_of_uid(uid) == [], "fork-bomb children survived the run"


def test_daemonised_child_does_not_outlive_the_run(iso):
    if not (iso.pid_namespace or iso.drops_uid):
        pytest.skip("without a PID namespace or a fresh uid, escaped processes cannot be found")
    res = run_python(
        textwrap.dedent(
            """
            import os, time
            if os.fork() == 0:
                os.setsid()          # leave the process group the sandbox kills
                if os.fork() == 0:
                    time.sleep(60)
                os._exit(0)
            print("parent", os.getpid(), flush=True)
            """
        ),
        limits=FAST,
    )
    assert res.ok, res.stderr_tail
    if res.uid is not None:
        deadline = time.monotonic() + 5
        while pids_of_uid(res.uid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pids_of_uid(res.uid) == []


def test_file_size_limit():
    res = run_python("open('big', 'wb').write(b'x' * (4 << 20))", limits=SandboxLimits(max_file_bytes=1 << 20))
    assert not res.ok and res.limit_hit == "file_size"


def test_write_outside_the_temp_dir_does_not_persist(iso):
    outside_tmp = Path(f"/tmp/outside-{uuid.uuid4().hex}")
    outside_repo = Path(__file__).resolve().parent / f"outside-{uuid.uuid4().hex}"
    code = f"""
    import os
    results = {{}}
    for p in ({str(outside_tmp)!r}, {str(outside_repo)!r}):
        try:
            with open(p, "w") as fh:
                fh.write("escaped")
            results[p] = "written"
        except OSError as e:
            results[p] = type(e).__name__
    open("inside.txt", "w").write("fine")       # the work dir itself is writable
    print(results, os.getcwd(), flush=True)
    """
    try:
        res = run_python(textwrap.dedent(code), limits=FAST)
        assert res.ok, res.stderr_tail
        if iso.private_tmp:
            assert not outside_tmp.exists(), "a write to /tmp escaped the private tmpfs"
        else:
            pytest.xfail(f"mode {iso.mode} has no private /tmp")  # recorded, not silently passed
        if iso.drops_uid:
            assert not outside_repo.exists(), "the sandbox user could write into the repository"
            # Refused (PermissionError), or not even visible when the checkout lives under /tmp,
            # which the sandbox replaces with its private tmpfs (FileNotFoundError): never written.
            repo_result = res.stdout_tail.split(repr(str(outside_repo)) + ": ", 1)[1].split("'")[1]
            assert repo_result in ("PermissionError", "FileNotFoundError"), res.stdout_tail
        # the work dir was fresh and is gone afterwards
        cwd = res.stdout_tail.strip().split()[-1]
        assert "conductor-sbx-" in cwd and not Path(cwd).exists()
    finally:
        outside_tmp.unlink(missing_ok=True)
        outside_repo.unlink(missing_ok=True)


def test_network_is_unreachable_even_to_a_local_listener(iso):
    if not iso.network:
        pytest.skip(f"mode {iso.mode} has no network isolation on this machine")
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    try:
        v = hostile(
            f"""
            import socket
            socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"leak")
            """
        )
        assert not v.correct
        assert "Network is unreachable" in v.reason or "OSError" in v.reason
        assert v.details["limit_hit"] == "network"
        with pytest.raises(TimeoutError):
            server.accept()  # nothing ever connected
        v2 = hostile("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)")
        assert not v2.correct and v2.details["limit_hit"] == "network"
    finally:
        server.close()


def test_local_unix_sockets_are_hidden(iso):
    # A network namespace does not cover unix sockets (e.g. PostgreSQL's under /run).
    candidates = [*Path("/run").rglob("*"), *Path("/tmp").glob("*")]
    sockets = [str(p) for p in candidates if _is_socket(p)][:20]
    if not sockets:
        pytest.skip("no unix sockets on this machine to try")
    if not iso.private_tmp:
        pytest.skip(f"mode {iso.mode} does not hide /run and /tmp")
    code = f"""
    import json, socket
    reached = []
    for path in {sockets!r}:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            reached.append(path)
        except OSError:
            pass
    print(json.dumps(reached))
    """
    res = run_python(textwrap.dedent(code), limits=FAST)
    assert res.ok, res.stderr_tail
    assert json.loads(res.stdout_tail) == []


def _is_socket(p: Path) -> bool:
    try:
        return stat.S_ISSOCK(p.lstat().st_mode)
    except OSError:
        return False


def test_killing_the_parent_or_the_test_runner_fails_only_the_verdict(iso):
    if not (iso.pid_namespace or iso.drops_uid):
        pytest.skip("without a PID namespace or a dropped uid the program could kill this test process")
    me = os.getpid()
    v = hostile(
        f"""
        import os, signal
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill({me}, signal.SIGKILL)
        """
    )
    assert os.getpid() == me  # still here
    assert not v.correct
    # Inside a PID namespace the parent is the namespace init, which ignores the signal, and
    # the test runner's pid does not exist (or is not ours to signal).
    assert any(e in v.reason for e in ("ProcessLookupError", "PermissionError")), v.reason


def test_kill_everything_reachable_only_kills_the_sandbox(iso):
    if not (iso.pid_namespace or iso.drops_uid):
        pytest.skip("without a PID namespace or a dropped uid kill(-1) would reach this test process")
    v = hostile("import os, signal\nos.kill(-1, signal.SIGKILL)\nimport time\ntime.sleep(30)")
    assert not v.correct
    assert "SIGKILL" in v.reason or "timeout" in v.reason


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("CONDUCTOR_TEST_SECRET", "s3cret")
    res = run_python("import json, os\nprint(json.dumps(sorted(os.environ)))", limits=FAST)
    assert res.ok
    names = set(json.loads(res.stdout_tail))
    assert "CONDUCTOR_TEST_SECRET" not in names
    assert names <= {"PATH", "LANG", "LC_CTYPE"}


def test_runs_in_isolated_mode_reading_the_program_from_stdin():
    res = run_python("import sys\nprint(sys.flags.isolated, sys.argv)", limits=FAST)
    assert res.ok
    assert res.stdout_tail.strip() == "1 ['-']"


def test_rlimits_fallback_mode_still_contains_and_cleans_up():
    fallback = detect_isolation(modes=("rlimits",))
    assert fallback.mode == "rlimits" and not fallback.network
    res = run_python("while True:\n    pass", limits=SandboxLimits(wall_time_s=1.0), isolation=fallback)
    assert res.timed_out and res.limit_hit == "wall_time"
    bomb = run_python("import os\nwhile True:\n    os.fork()", limits=FAST, isolation=fallback)
    assert not bomb.ok
    if fallback.drops_uid:
        assert bomb.limit_hit == "processes"
        assert pids_of_uid(bomb.uid) == []
