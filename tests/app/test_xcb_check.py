"""The check before the window opens on Linux (app/xcb_check.py): the libraries Qt's xcb plugin links
that do not load are named in one `error:` line with their Debian/Ubuntu packages, exit 2, instead of
Qt's abort (134); nothing is said when all load, or when Qt will not use xcb (offscreen, Wayland)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from branchscope.app import cli, xcb_check

X11 = {"DISPLAY": ":99"}
ABSENT = {"libxcb-icccm.so.4", "libxcb-keysyms.so.1"}  # what the machine lacked


def _without(absent: set[str]):
    seen: list[str] = []

    def loads(soname: str) -> bool:
        seen.append(soname)
        return soname not in absent

    return loads, seen


def test_the_missing_libraries_are_named_with_their_packages() -> None:
    loads, seen = _without(ABSENT)
    line = xcb_check.check(X11, loads, platform="linux")
    assert "\n" not in line
    assert line.startswith("the window needs libxcb-icccm.so.4, libxcb-keysyms.so.1,")
    assert "(Debian/Ubuntu: apt install libxcb-icccm4 libxcb-keysyms1)" in line
    assert "xcb-cursor" not in line  # what Qt would have blamed
    assert set(seen) == {s for s, _ in xcb_check.XCB_PLUGIN_LIBRARIES}  # every one was tried


def test_nothing_is_said_when_every_library_loads() -> None:
    loads, seen = _without(set())
    assert xcb_check.check(X11, loads, platform="linux") == ""
    assert seen  # it did look


@pytest.mark.parametrize("env", [
    {"QT_QPA_PLATFORM": "offscreen", "DISPLAY": ":99"},
    {"QT_QPA_PLATFORM": "minimal", "DISPLAY": ":99"},
    {"QT_QPA_PLATFORM": "wayland;xcb", "DISPLAY": ":99", "WAYLAND_DISPLAY": "wayland-0"},
    {"DISPLAY": ":99", "WAYLAND_DISPLAY": "wayland-0"},
    {},
], ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()) or "no display")  # fmt: skip
def test_skipped_where_qt_will_not_use_xcb(env: dict[str, str]) -> None:
    loads, seen = _without({s for s, _ in xcb_check.XCB_PLUGIN_LIBRARIES})
    assert xcb_check.check(env, loads, platform="linux") == ""
    assert seen == []  # not even looked for


@pytest.mark.parametrize("env", [
    {"DISPLAY": ":0"}, {"QT_QPA_PLATFORM": "", "DISPLAY": ":0"}, {"QT_QPA_PLATFORM": "xcb"},
    {"QT_QPA_PLATFORM": "xcb:nograb"}, {"QT_QPA_PLATFORM": "xcb;wayland", "WAYLAND_DISPLAY": "w"},
], ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()))  # fmt: skip
def test_checked_where_qt_uses_xcb(env: dict[str, str]) -> None:
    assert xcb_check.uses_xcb(env, "linux")
    assert not xcb_check.uses_xcb(env, "darwin") and not xcb_check.uses_xcb(env, "win32")


def test_the_real_loader() -> None:
    assert xcb_check.library_loads("libc.so.6" if sys.platform.startswith("linux") else "libc.dylib")
    assert not xcb_check.library_loads("libbranchscope-no-such-library.so.7")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Qt's xcb plugin: Linux")
def test_the_window_exits_2_with_the_line_before_qt_starts(monkeypatch, capsys) -> None:
    """`branchscope` (the window) on an X display lacking two of them: the line, exit 2, and no
    window made (QApplication is never reached: its import would fail the test)."""
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.setattr(xcb_check, "library_loads", lambda soname: soname not in ABSENT)

    class NoQt:
        def find_spec(self, name, path=None, target=None):
            if name.startswith("branchscope.app.main_window") or name == "PySide6.QtWidgets":
                raise AssertionError(f"{name} imported before the check said no")

    monkeypatch.setattr(sys, "meta_path", [NoQt(), *sys.meta_path])
    monkeypatch.delitem(sys.modules, "PySide6.QtWidgets", raising=False)
    monkeypatch.delitem(sys.modules, "branchscope.app.main_window", raising=False)
    assert cli.main(["--demo", "twin-mm"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith("error: the window needs libxcb-icccm.so.4, libxcb-keysyms.so.1,")
    assert "apt install libxcb-icccm4 libxcb-keysyms1" in err[0]
    assert err[0].endswith("branchscope --screenshot window.png")


def _plugin() -> Path | None:
    try:
        import PySide6
    except ImportError:
        return None
    path = Path(PySide6.__file__).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    return path if path.is_file() else None


@pytest.mark.skipif(_plugin() is None or shutil.which("readelf") is None,
                    reason="needs PySide6's libqxcb.so (Linux) and readelf")  # fmt: skip
def test_the_table_holds_every_system_library_the_installed_plugin_links() -> None:
    """A PySide6 upgrade whose plugin links one more X library fails here until the table names it."""
    out = subprocess.run(["readelf", "-d", str(_plugin())], capture_output=True, text=True, check=True).stdout
    needed = {line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line}
    system = {n for n in needed if not n.startswith("libQt6")} - {
        "libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6", "libpthread.so.0", "libdl.so.2"}  # fmt: skip
    assert system <= {s for s, _ in xcb_check.XCB_PLUGIN_LIBRARIES}
