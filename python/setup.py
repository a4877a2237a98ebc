"""setup.py - builds tessera._tessera against the installed C SDK (docs/install.md).

The SDK is found with pkg-config (`pkg-config tessera`): install it first with `make install`
(PREFIX=... to choose where) and, for a prefix pkg-config does not search, set
PKG_CONFIG_PATH=PREFIX/lib/pkgconfig. The extension links libtessera.so with a run path to
that prefix, so `import tessera` needs neither PYTHONPATH nor LD_LIBRARY_PATH.
"""
import shlex
import subprocess
import sys

from setuptools import Extension, setup


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, "tessera"], check=True,
                             capture_output=True, text=True).stdout
    except FileNotFoundError:
        sys.exit("tessera: pkg-config is missing (apt-get install pkg-config)")
    except subprocess.CalledProcessError as e:
        sys.exit("tessera: the C SDK was not found by pkg-config (%s).\nInstall it first: "
                 "`make install PREFIX=DIR` in the Tessera tree, then set "
                 "PKG_CONFIG_PATH=DIR/lib/pkgconfig" % e.stderr.strip())
    return shlex.split(out)


libdir = pkg_config("--variable=libdir")[0]
ext = Extension(
    "tessera._tessera",
    sources=["tessera/_tessera.c", "tessera/args.c", "tessera/buffers.c", "tessera/fixed.c",
             "tessera/some.c", "tessera/work.c", "tessera/launch.c",
             "tessera/step.c", "tessera/rows.c",
             "tessera/assign.c", "tessera/snapshot.c"],
    extra_compile_args=pkg_config("--cflags") + ["-std=c11"],
    extra_link_args=pkg_config("--libs") + ["-Wl,-rpath," + libdir],
)
setup(ext_modules=[ext])
