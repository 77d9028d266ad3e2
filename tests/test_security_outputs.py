"""What gicbench writes into run and report directories, against a hostile local user: no write
through a planted link, no directory another user can write, no output path inside a run that is
not the report's own, a failed write named for what it is, run.json fields escaped in report.md.
"""

from __future__ import annotations

import errno
import inspect
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import security_helpers
from security_helpers import OtherUser, root_only_file
from trace_helpers import make_run

from gicbench import rundir
from gicbench.analysis.cli import main
from gicbench.errors import ConfigError
from gicbench.trace import read_manifest, write_manifest

SECRET = "root's secret\n"

# fixtures of the second local user (tests/security_helpers.py)
other_user = security_helpers.other_user
shared_dir = security_helpers.shared_dir


def _small_run(path: Path) -> Path:
    return make_run(path, world_size=1, n=60)


def _report_in_child(*argv: str, timeout: float = 180, env: dict | None = None,
                     preexec=None) -> subprocess.CompletedProcess:
    """`gicbench report` in its own process: bounded (a FIFO must not hang the test) and with
    its own resource limits where a test sets them."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from gicbench.analysis.cli import main; "
         "sys.exit(main(sys.argv[1:]))", "report", *argv],
        capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}, preexec_fn=preexec,
    )  # fmt: skip


# ---- a run directory of another user ---------------------------------------------------------


def test_report_in_another_users_directory_is_refused_and_follows_no_link(
    other_user: OtherUser, shared_dir: Path, capsys
) -> None:
    run = _small_run(shared_dir / "run")
    victim = root_only_file(shared_dir)
    elsewhere = shared_dir / "created-by-root.png"
    # the other user's directory (mode 777) with its links planted where the report goes
    os.chown(run, other_user.uid, other_user.gid)
    os.chmod(run, 0o777)
    other_user.run("ln", "-s", str(victim), str(run / "report.md"))
    other_user.run("mkdir", str(run / "plots"))
    other_user.run("ln", "-s", str(elsewhere), str(run / "plots" / "single-op-latency.png"))
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"owned by {other_user.name}" in err and "Traceback" not in err
    assert victim.read_text() == SECRET and not elsewhere.exists()


def test_run_refuses_an_empty_directory_of_another_user(
    other_user: OtherUser, shared_dir: Path
) -> None:
    d = shared_dir / "offered"
    other_user.run("mkdir", "-m", "777", str(d))
    with pytest.raises(ConfigError, match=f"owned by {other_user.name}"):
        rundir.claim(d)


def test_run_manifest_is_not_written_into_another_users_directory(
    other_user: OtherUser, shared_dir: Path
) -> None:
    d = shared_dir / "offered"
    other_user.run("mkdir", "-m", "777", str(d))
    victim = root_only_file(shared_dir)
    other_user.run("ln", "-s", str(victim), str(d / "run.json"))
    with pytest.raises(ConfigError, match=f"owned by {other_user.name}"):
        write_manifest(d, {"world_size": 1, "status": "running"})
    assert victim.read_text() == SECRET


def test_links_in_a_sticky_directory_are_replaced_not_followed(
    other_user: OtherUser, shared_dir: Path
) -> None:
    """A directory every user may write but with the sticky bit (like /tmp) is accepted; a link
    another user planted at the report's name is replaced, its target untouched."""
    run = _small_run(shared_dir / "run")
    os.chmod(run, 0o1777)
    victim = root_only_file(shared_dir)
    other_user.run("ln", "-s", str(victim), str(run / "report.md"))
    assert main(["report", str(run)]) == 0
    assert victim.read_text() == SECRET
    st = os.lstat(run / "report.md")
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
    assert "## single-op" in (run / "report.md").read_text()


def test_directory_every_user_can_write_without_sticky_bit_is_refused(
    tmp_path: Path, capsys
) -> None:
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(ConfigError, match="every user can write it"):
        rundir.claim(d)
    run = _small_run(tmp_path / "run")
    os.chmod(run, 0o777)
    assert main(["report", str(run)]) == 2
    assert "every user can write it" in capsys.readouterr().err
    assert not (run / "report.md").exists()


# ---- links given or found in one's own directories -------------------------------------------


def test_report_replaces_a_link_at_report_md_instead_of_writing_through(tmp_path: Path) -> None:
    run = _small_run(tmp_path / "run")
    victim = root_only_file(tmp_path)
    (run / "report.md").symlink_to(victim)
    assert main(["report", str(run)]) == 0
    assert victim.read_text() == SECRET
    assert not (run / "report.md").is_symlink()


def test_report_out_that_is_a_link_is_refused(tmp_path: Path, capsys) -> None:
    run = _small_run(tmp_path / "run")
    victim = root_only_file(tmp_path)
    link = tmp_path / "out.md"
    link.symlink_to(victim)
    assert main(["report", str(run), "-o", str(link)]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert victim.read_text() == SECRET


def test_run_out_that_is_a_link_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "empty"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match="symbolic link to"):
        rundir.claim(link)


def test_dangling_link_is_called_a_dangling_link(tmp_path: Path, capsys) -> None:
    link = tmp_path / "gone"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"symbolic link to .*nowhere \(dangling\)"):
        rundir.claim(link)
    assert main(["analyze", str(link)]) == 2
    assert "symbolic link to" in capsys.readouterr().err


def test_a_new_run_directory_is_writable_by_its_owner_only(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        assert rundir.claim(tmp_path / "new")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) & 0o022 == 0


def test_manifest_into_a_linked_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(ConfigError, match="symbolic link"):
        write_manifest(tmp_path / "link", {"world_size": 1, "status": "running"})
    assert not (real / "run.json").exists()


# ---- output paths inside runs ----------------------------------------------------------------


@pytest.mark.parametrize("target", ["run.json", "notes.md", "plots/x.md", "OTHER/report.md",
                                    "OTHER/run.json", "SWEEP/sweep.json"])
def test_report_output_inside_a_run_other_than_its_own_is_refused(
    tmp_path: Path, target: str, capsys
) -> None:
    run = _small_run(tmp_path / "run")
    other = _small_run(tmp_path / "other")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text("{}\n")
    before = {p: p.read_bytes() for p in (run / "run.json", other / "run.json",
                                          sweep / "sweep.json")}
    out = {"OTHER": other, "SWEEP": sweep}.get(target.split("/")[0], run) / target.split("/")[-1]
    if target.startswith("plots/"):
        out = run / "plots" / "x.md"
    assert main(["report", str(run), "-o", str(out)]) == 2
    assert "out (-o)" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in before} == before
    assert not out.exists() or out.name in ("run.json", "sweep.json")
    assert read_manifest(run)["status"] == "complete"


def test_report_over_a_users_file_is_refused_and_over_an_earlier_report_accepted(
    tmp_path: Path, capsys
) -> None:
    run = _small_run(tmp_path / "run")
    precious = tmp_path / "precious.md"
    precious.write_text("my notes\n")
    assert main(["report", str(run), "-o", str(precious)]) == 2
    assert "out (-o)" in capsys.readouterr().err and precious.read_text() == "my notes\n"
    fresh = tmp_path / "fresh.md"
    assert main(["report", str(run), "-o", str(fresh)]) == 0
    assert main(["report", str(run), "-o", str(fresh)]) == 0  # its own earlier report


def test_report_at_its_own_place_given_explicitly_is_accepted(tmp_path: Path) -> None:
    run = _small_run(tmp_path / "run")
    assert main(["report", str(run), "-o", str(run / "report.md")]) == 0


# ---- failed writes ---------------------------------------------------------------------------


def test_full_disk_names_the_path_and_cause_and_leaves_nothing_half_written(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    run = _small_run(tmp_path / "run")
    import gicbench.safe_files as safe_files

    def full(fd: int, data: bytes) -> None:
        os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(safe_files, "_write_all", full)
    assert main(["report", str(run)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0], err
    assert str(run / "plots") in err[0] and "trace" not in err[0]
    left = [p.name for p in run.rglob("*") if p.is_file() and p.name not in (
        "run.json", "rank-00000.h5")]
    assert left == [], left


def test_file_size_limit_is_reported_as_the_write_failure(tmp_path: Path) -> None:
    """A real write failure through the whole stack (RLIMIT_FSIZE: EFBIG, no root needed)."""
    run = _small_run(tmp_path / "run")

    def limit() -> None:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    r = _report_in_child(str(run), preexec=limit)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1, r.stderr
    assert len(lines) == 1 and "cannot write" in lines[0] and "File too large" in lines[0], lines
    assert "Traceback" not in r.stderr
    leftovers = [p for p in run.rglob("*") if p.is_file() and p.name not in (
        "run.json", "rank-00000.h5")]
    assert leftovers == [], leftovers


def test_fifo_at_the_report_name_does_not_hang(tmp_path: Path) -> None:
    run = _small_run(tmp_path / "run")
    os.mkfifo(run / "report.md")
    r = _report_in_child(str(run), timeout=120)
    assert r.returncode == 0, r.stderr
    assert stat.S_ISREG(os.lstat(run / "report.md").st_mode)


def test_directory_at_the_report_name_is_named_as_the_cause(tmp_path: Path, capsys) -> None:
    run = _small_run(tmp_path / "run")
    (run / "report.md").mkdir()
    assert main(["report", str(run)]) == 1
    err = capsys.readouterr().err
    assert f"cannot write {run / 'report.md'}" in err and "directory" in err
    assert "trace may be damaged" not in err


# ---- what report.md shows --------------------------------------------------------------------


def test_manifest_fields_are_escaped_in_the_report(tmp_path: Path) -> None:
    run = _small_run(tmp_path / "run")
    doc = json.loads((run / "run.json").read_text())
    doc["argv"] = ["gicbench", "a|b", "`code`", "two\nlines", "<img src=x onerror=alert(1)>",
                   "[click](http://example.invalid/x)", "![i](http://example.invalid/t.png)"]
    doc["git_rev"] = "abc|<b>bold</b>\r\n# heading"
    write_manifest(run, doc)
    assert main(["report", str(run)]) == 0
    text = (run / "report.md").read_text()
    assert "<img" not in text and "<b>" not in text
    assert re.search(r"(?<!\\)\]\(http", text) is None  # no link: every ] is escaped
    lines = text.splitlines()
    argv = [ln for ln in lines if ln.startswith("| argv |")]
    rev = [ln for ln in lines if ln.startswith("| git_rev |")]
    assert len(argv) == 1 and len(rev) == 1
    assert not any(ln.startswith("# heading") or ln.startswith("lines") for ln in lines)
    for row in (argv[0], rev[0]):
        unescaped = row.replace("\\|", "")
        assert unescaped.count("|") == 3, row  # | field | value |: the cell holds no column
    assert "`" not in argv[0].replace("\\`", "")


def test_every_plot_is_saved_through_the_one_save_helper() -> None:
    from gicbench.analysis import plots

    source = inspect.getsource(plots)
    assert source.count(".savefig(") == 1, "plots.py: save figures with save_figure(fig, out)"


# ---- trying to break the checks ---------------------------------------------------------------


def test_directory_swapped_for_a_link_after_the_check_gets_nothing_through(tmp_path: Path) -> None:
    """The check and the write use one descriptor: replacing the checked directory by a link to
    another place between them sends the file to the checked directory, not through the link."""
    from gicbench import safe_files

    run, moved, victim_dir = tmp_path / "run", tmp_path / "moved", tmp_path / "victim"
    run.mkdir()
    victim_dir.mkdir()
    fd = safe_files.open_dir(run, "test")
    try:
        run.rename(moved)
        run.symlink_to(victim_dir)
        safe_files.write_at(fd, "report.md", b"text\n", run / "report.md")
    finally:
        os.close(fd)
    assert list(victim_dir.iterdir()) == []
    assert (moved / "report.md").read_bytes() == b"text\n"


def test_fifo_at_run_json_is_replaced_not_opened(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "run.json")
    write_manifest(run, {"world_size": 1, "status": "running"})  # (opening it would block)
    assert read_manifest(run)["status"] == "running"


def test_a_run_directory_is_never_reused(tmp_path: Path) -> None:
    run = _small_run(tmp_path / "run")
    with pytest.raises(ConfigError, match="an earlier run"):
        rundir.claim(run)
    only_link = tmp_path / "link-only"
    only_link.mkdir()
    (only_link / "report.md").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"report\.md"):
        rundir.claim(only_link)


def test_report_directory_given_as_a_link_is_refused(tmp_path: Path, capsys) -> None:
    run = _small_run(tmp_path / "run")
    (tmp_path / "latest").symlink_to(run)
    assert main(["report", str(tmp_path / "latest")]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert not (run / "report.md").exists()


def test_report_on_a_directory_that_is_no_run_leaves_nothing_there(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty)]) == 2
    assert list(empty.iterdir()) == []


def test_group_writable_directory_is_refused_unless_the_group_is_the_users_own(
    tmp_path: Path, other_user: OtherUser
) -> None:
    """Group write lets the group's other members plant links; a user-private group (named
    after the user, no other members: the umask 002 convention) has none."""
    import grp
    import pwd

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, -1, other_user.gid)  # the other user's primary group
    os.chmod(shared, 0o775)
    group = grp.getgrgid(other_user.gid).gr_name
    with pytest.raises(ConfigError, match=f"group {group} can write it"):
        rundir.claim(shared)
    me = pwd.getpwuid(os.geteuid()).pw_name
    own = grp.getgrgid(os.getegid())
    if own.gr_name != me or set(own.gr_mem) - {me}:
        pytest.skip(f"this user's group {own.gr_name} is not a user-private group")
    private = tmp_path / "private"
    private.mkdir()
    os.chmod(private, 0o775)
    assert rundir.claim(private) is False
