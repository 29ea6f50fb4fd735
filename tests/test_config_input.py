"""Bad input: a clear one-line message and exit code 2, never a traceback."""

import pytest

from tests.conftest import run_cli

CASES = {
    "empty.yaml": b"",
    "binary.yaml": b"\x00\x01\x02garbage\xff",
    "list.yaml": b"- a\n- b\n",
    "scalar.yaml": b"just a string\n",
    "syntax.yaml": b"model_name_or_path: [unclosed\nstage: sft\n",
    "tabs.yaml": b"a:\n\t- b\n",
    "latin1.yaml": "stage: s\xe9ft\n".encode("latin-1"),
    "bomb.yaml": (b"a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                  b"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                  b"e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_config_exit_2(tmp_path, name):
    p = tmp_path / name
    p.write_bytes(CASES[name])
    r = run_cli("check", "--quick", str(p))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.startswith("rocm-doctor: error:")
    assert len(r.stderr.strip().splitlines()) == 1


def test_missing_and_directory(tmp_path):
    for arg in (str(tmp_path / "nope.yaml"), str(tmp_path)):
        r = run_cli("check", "--quick", arg)
        assert r.returncode == 2 and "Traceback" not in r.stderr


def test_unreadable(tmp_path):
    import os

    p = tmp_path / "secret.yaml"
    p.write_text("stage: sft\n")
    p.chmod(0)
    if os.geteuid() == 0:
        pytest.skip("root reads anything")
    r = run_cli("check", "--quick", str(p))
    assert r.returncode == 2


def test_bad_usage_exit_2():
    assert run_cli("check", "--only", "nonsense", "--quick").returncode == 2
    assert run_cli("frobnicate").returncode == 2
    assert run_cli("codes", "NOPE123").returncode == 2


@pytest.mark.parametrize("python", ["/nonexistent/python3", "/"])
def test_python_that_does_not_exist_is_a_usage_error(python):
    """A typo in --python is exit 2 with one line, not TORCH001's advice to reinstall torch."""
    for args in (["check", "--json", "--only", "torch"], ["report", "--quick", "-o", "/tmp/never-written.tar.gz"]):
        r = run_cli(*args, "--python", python)
        assert r.returncode == 2 and "--python" in r.stderr and not r.stdout, (r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_version_and_unknown_command():
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("rocm-doctor ")
    r = run_cli("chekc")
    assert r.returncode == 2 and "did you mean 'check'" in r.stderr and "Traceback" not in r.stderr
    r = run_cli()
    assert r.returncode == 2 and "check" in r.stderr  # the command list, on stderr
