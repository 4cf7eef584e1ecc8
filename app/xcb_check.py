"""Before the window opens on Linux: are the system libraries of Qt's xcb platform plugin there?

PySide6 ships Qt itself but not the X11 libraries its `libqxcb.so` links. Where one is missing, Qt
cannot load the plugin and aborts (exit 134) with a message that names `xcb-cursor0` whatever is
missing. This module says instead, in one line, which libraries are missing and the Debian/Ubuntu
packages that hold them. Pure logic: no Qt is imported (the check runs before QApplication is made);
whether a library loads is a function the caller may inject (the tests do).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

#: The system libraries PySide6 6.11's `plugins/platforms/libqxcb.so` needs (its DT_NEEDED entries,
#: Qt's own and libc's left out), each with the Debian/Ubuntu package that holds it, in that order.
XCB_PLUGIN_LIBRARIES: tuple[tuple[str, str], ...] = (
    ("libxcb.so.1", "libxcb1"),
    ("libX11.so.6", "libx11-6"),
    ("libX11-xcb.so.1", "libx11-xcb1"),
    ("libGL.so.1", "libgl1"),
    ("libxkbcommon.so.0", "libxkbcommon0"),
    ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0"),
    ("libxcb-cursor.so.0", "libxcb-cursor0"),
    ("libxcb-icccm.so.4", "libxcb-icccm4"),
    ("libxcb-util.so.1", "libxcb-util1"),
    ("libxcb-image.so.0", "libxcb-image0"),
    ("libxcb-keysyms.so.1", "libxcb-keysyms1"),
    ("libxcb-randr.so.0", "libxcb-randr0"),
    ("libxcb-render-util.so.0", "libxcb-render-util0"),
    ("libxcb-render.so.0", "libxcb-render0"),
    ("libxcb-shm.so.0", "libxcb-shm0"),
    ("libxcb-sync.so.1", "libxcb-sync1"),
    ("libxcb-xfixes.so.0", "libxcb-xfixes0"),
    ("libxcb-shape.so.0", "libxcb-shape0"),
    ("libxcb-xkb.so.1", "libxcb-xkb1"),
)


def uses_xcb(environ: Mapping[str, str], platform: str | None = None) -> bool:
    """Whether Qt would start on its xcb plugin: on Linux or a BSD, `QT_QPA_PLATFORM` names xcb first
    (`xcb`, `xcb:OPTIONS`, `xcb;wayland`), or is unset/empty with an X display (`DISPLAY`) and no
    Wayland one (with `WAYLAND_DISPLAY` set Qt may start on Wayland, which needs none of these).
    Offscreen, minimal, wayland… never. `platform`: default `sys.platform`."""
    platform = sys.platform if platform is None else platform
    if not (platform.startswith("linux") or "bsd" in platform):
        return False
    asked = environ.get("QT_QPA_PLATFORM", "").strip()
    if asked:
        first = asked.split(";", 1)[0].split(":", 1)[0].strip()
        return first == "xcb"
    return bool(environ.get("DISPLAY")) and not environ.get("WAYLAND_DISPLAY")


def library_loads(soname: str) -> bool:
    """Whether the dynamic loader finds and loads `soname` (LD_LIBRARY_PATH and ld.so.cache alike,
    as it will for Qt's plugin). Loading it here costs nothing: Qt would load it next."""
    import ctypes

    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def missing_libraries(loads: Callable[[str], bool] | None = None) -> list[tuple[str, str]]:
    """The (soname, package) pairs of `XCB_PLUGIN_LIBRARIES` that do not load (`loads`: default
    `library_loads`), in table order."""
    loads = loads or library_loads
    return [(soname, package) for soname, package in XCB_PLUGIN_LIBRARIES if not loads(soname)]


#: How to get a picture of the window without these libraries, for the line's end.
SCREENSHOT_HINT = "branchscope --screenshot window.png"


def missing_line(missing: list[tuple[str, str]], hint: str = SCREENSHOT_HINT) -> str:
    """What to tell the user (without the `error: ` prefix), one line; "" when nothing is missing.
    `hint`: the command that draws the window to a PNG instead (offscreen needs none of them)."""
    if not missing:
        return ""
    names = ", ".join(soname for soname, _ in missing)
    packages = " ".join(package for _, package in missing)
    return (
        f"the window needs {names}, which Qt's xcb plugin links (Debian/Ubuntu: apt install {packages}); "
        f"without them draw the window to a PNG instead: {hint}"
    )


def check(environ: Mapping[str, str] | None = None, loads: Callable[[str], bool] | None = None,
          platform: str | None = None, hint: str = SCREENSHOT_HINT) -> str:  # fmt: skip
    """The line naming what Qt's xcb plugin misses, or "" (nothing missing, or Qt will not use xcb)."""
    env = os.environ if environ is None else environ
    if not uses_xcb(env, platform):
        return ""
    return missing_line(missing_libraries(loads), hint)
