"""PEP 517 build backend of the dltrain wheel: builds libdltrain with meson and bundles it.

Why an in-tree backend: `pip install ./bindings/python` must work offline (no PyPI here or
in CI). pip installs a backend's `requires` into an isolated environment from the package
index, so a backend that needs meson-python or setuptools fails without a network. This
one is standard library only (`requires = []`), so pip needs nothing from the index; it
runs the meson and ninja found on PATH.

The wheel holds the pure-Python package `dltrain` and the shared library as
dltrain/libdltrain.so.1, which the loader (dltrain/_lib.py) tries right after an explicit
DLTRAIN_LIBRARY. Tag py3-none-<platform>: one wheel serves every Python 3 (ctypes, no
extension module), for this platform. The library still links the system's OpenBLAS,
cJSON, OpenMP runtime (and CUDA/cuDNN in a CUDA build); they are not copied in.

Config settings (pip: -C key=value, `python -m build`: -Ckey=value):
  builddir=PATH    meson build directory to use (default: build-wheel at the project root);
                   an existing configured one is used as it is (only brought up to date)
  setup-args=ARGS  extra `meson setup` arguments for a new build directory, e.g.
                   "-Dcuda=disabled" or "-Dgpu_arch=86" (shell-style quoting)
A new build directory is configured with -Dbuildtype=release -Ddefault_library=shared
-Dtests=false -Dexamples=false.

The C sources come from the repository around bindings/python, or from the libdltrain/
folder of an sdist made by build_sdist.
"""

import base64
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sysconfig
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bindings/python
ABI = 1  # the SONAME number the loader looks for (dltrain/_lib.py ABI_VERSION)

# What an sdist carries of the C project (meson.build's inputs for a library-only build).
_SDIST_C_PATHS = ["meson.build", "meson_options.txt", "LICENSE", "README.md", "include", "lib",
                  "cuda"]


# ---- project metadata (pyproject.toml's [project]) --------------------------------------

def _parse_toml_subset(text):
    """The part of TOML pyproject.toml uses: tables, strings, arrays of strings (one or more
    lines), inline tables of strings. For Pythons before 3.11 (no tomllib)."""
    data = {}
    table = data
    lines = iter(text.splitlines())
    for line in lines:
        line = line.split(" #")[0].strip() if not line.strip().startswith("#") else ""
        if not line:
            continue
        m = re.match(r"^\[([^\]]+)\]$", line)
        if m:
            table = data
            for part in m.group(1).split("."):
                table = table.setdefault(part.strip().strip('"'), {})
            continue
        key, _, value = line.partition("=")
        key, value = key.strip().strip('"'), value.strip()
        while value.startswith("[") and value.count("[") > value.count("]"):
            value += " " + next(lines).split(" #")[0].strip()
        table[key] = _toml_value(value)
    return data


def _toml_value(value):
    if value.startswith("["):
        return re.findall(r'"((?:[^"\\]|\\.)*)"', value)
    if value.startswith("{"):
        return dict(re.findall(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"', value))
    if value.startswith('"'):
        return value[1:value.rindex('"')]
    return value


def _pyproject():
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        raw = f.read()
    try:
        import tomllib
        return tomllib.loads(raw.decode("utf-8"))
    except ImportError:
        return _parse_toml_subset(raw.decode("utf-8"))


def _metadata_text():
    proj = _pyproject()["project"]
    lines = ["Metadata-Version: 2.1", "Name: " + proj["name"], "Version: " + proj["version"]]
    if proj.get("description"):
        lines.append("Summary: " + proj["description"])
    lic = proj.get("license")
    if isinstance(lic, dict) and lic.get("text"):
        lines.append("License: " + lic["text"])
    if proj.get("requires-python"):
        lines.append("Requires-Python: " + proj["requires-python"])
    for c in proj.get("classifiers", []):
        lines.append("Classifier: " + c)
    for dep in proj.get("dependencies", []):
        lines.append("Requires-Dist: " + dep)
    for extra, deps in proj.get("optional-dependencies", {}).items():
        lines.append("Provides-Extra: " + extra)
        for dep in deps:
            lines.append('Requires-Dist: %s; extra == "%s"' % (dep, extra))
    body = ""
    readme = proj.get("readme")
    if isinstance(readme, str) and os.path.exists(os.path.join(HERE, readme)):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(HERE, readme), encoding="utf-8") as f:
            body = "\n" + f.read()
    return proj["name"], proj["version"], "\n".join(lines) + "\n" + body


def _tag():
    plat = re.sub(r"[-.]", "_", sysconfig.get_platform())
    return "py3-none-" + plat


def _dist_info_files(name, version):
    _, _, meta = _metadata_text()
    wheel = ("Wheel-Version: 1.0\nGenerator: dltrain_backend\nRoot-Is-Purelib: false\n"
             "Tag: %s\n" % _tag())
    return {"METADATA": meta, "WHEEL": wheel, "top_level.txt": "dltrain\n"}


# ---- building the library ----------------------------------------------------------------

def _project_root():
    for root in (os.path.join(HERE, "libdltrain"), os.path.dirname(os.path.dirname(HERE))):
        build_file = os.path.join(root, "meson.build")
        if os.path.exists(build_file):
            with open(build_file, encoding="utf-8") as f:
                if re.search(r"project\(\s*'dltrain'", f.read()):
                    return root
    raise RuntimeError(
        "dltrain: the C sources of libdltrain are not here (looked for meson.build in %s/"
        "libdltrain and two folders up); build the wheel from a libdltrain checkout or sdist"
        % HERE)


def _settings(config_settings):
    cs = config_settings or {}

    def one(key):
        v = cs.get(key)
        return v[-1] if isinstance(v, list) else v

    args = cs.get("setup-args") or []
    if isinstance(args, str):
        args = [args]
    setup_args = [a for arg in args for a in shlex.split(arg)]
    return one("builddir"), setup_args


def _run(cmd, what):
    # pip's isolated build environment points PYTHONPATH at its own site folder (hiding the
    # system's packages): meson, a Python program with its own interpreter, must not inherit it
    env = dict(os.environ)
    for var in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME"):
        env.pop(var, None)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, env=env)
    if p.returncode != 0:
        tail = "\n".join(p.stdout.splitlines()[-40:])
        raise RuntimeError("dltrain: %s failed (%s), exit %d; last lines:\n%s"
                           % (what, " ".join(cmd), p.returncode, tail))
    return p.stdout


def _tool(name, debian_package):
    path = shutil.which(name)
    if not path:
        raise RuntimeError("dltrain: building the wheel needs %s on PATH (Debian/Ubuntu: "
                           "apt-get install %s)" % (name, debian_package))
    return path


def _build_library(config_settings, stage):
    """Builds libdltrain and installs it under stage; returns the shared library's path."""
    root = _project_root()
    builddir, setup_args = _settings(config_settings)
    builddir = os.path.abspath(builddir or os.path.join(root, "build-wheel"))
    meson = _tool("meson", "meson")
    _tool("ninja", "ninja-build")
    if not os.path.exists(os.path.join(builddir, "build.ninja")):
        _run([meson, "setup", builddir, root, "-Dbuildtype=release", "-Ddefault_library=shared",
              "-Dtests=false", "-Dexamples=false"] + setup_args, "configuring libdltrain")
    _run([meson, "compile", "-C", builddir], "building libdltrain")
    _run([meson, "install", "-C", builddir, "--destdir", stage, "--no-rebuild"],
         "installing libdltrain into the staging folder")
    found = []
    for dirpath, _, files in os.walk(stage):
        for f in files:
            p = os.path.join(dirpath, f)
            if re.match(r"^libdltrain\.so\.\d+\.\d+\.\d+$", f) and not os.path.islink(p):
                found.append(p)
    if len(found) != 1:
        raise RuntimeError("dltrain: expected one libdltrain.so.X.Y.Z in the installation, "
                           "found %r" % found)
    return found[0]


# ---- the wheel ---------------------------------------------------------------------------

def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


def _package_files():
    """(arcname, path) of the pure-Python package dltrain."""
    out = []
    pkg = os.path.join(HERE, "dltrain")
    for dirpath, dirnames, files in os.walk(pkg):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py") or f == "py.typed":
                p = os.path.join(dirpath, f)
                out.append((os.path.relpath(p, HERE).replace(os.sep, "/"), p))
    return out


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    name, version, _ = _metadata_text()
    dist_info = "%s-%s.dist-info" % (name, version)
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    for fname, text in _dist_info_files(name, version).items():
        with open(os.path.join(metadata_directory, dist_info, fname), "w", encoding="utf-8") as f:
            f.write(text)
    return dist_info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version, _ = _metadata_text()
    wheel_name = "%s-%s-%s.whl" % (name, version, _tag())
    dist_info = "%s-%s.dist-info" % (name, version)
    records = []
    with tempfile.TemporaryDirectory(prefix="dltrain-wheel-") as stage:
        lib = _build_library(config_settings, stage)
        os.makedirs(wheel_directory, exist_ok=True)
        tmp_path = os.path.join(wheel_directory, wheel_name + ".part")
        with zipfile.ZipFile(tmp_path, "w", zipfile.ZIP_DEFLATED) as z:
            def add(arcname, data, mode=0o644):
                info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = (0o100000 | mode) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, data)
                records.append(_record_line(arcname, data))

            for arcname, path in _package_files():
                with open(path, "rb") as f:
                    add(arcname, f.read())
            with open(lib, "rb") as f:
                add("dltrain/libdltrain.so.%d" % ABI, f.read(), 0o755)
            for fname, text in _dist_info_files(name, version).items():
                add("%s/%s" % (dist_info, fname), text.encode("utf-8"))
            lic = os.path.join(_project_root(), "LICENSE")
            if os.path.exists(lic):
                with open(lic, "rb") as f:
                    add(dist_info + "/LICENSE", f.read())
            record = "%s/RECORD" % dist_info
            records.append(record + ",,")
            z.writestr(zipfile.ZipInfo(record, date_time=(2020, 1, 1, 0, 0, 0)),
                       "\n".join(records) + "\n")
        os.replace(tmp_path, os.path.join(wheel_directory, wheel_name))
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    """The binding, this backend and the C project (under libdltrain/) in one tarball, so
    the wheel can be built from it alone."""
    name, version, meta = _metadata_text()
    base = "%s-%s" % (name, version)
    root = _project_root()
    os.makedirs(sdist_directory, exist_ok=True)
    path = os.path.join(sdist_directory, base + ".tar.gz")

    def skip(tarinfo):
        parts = tarinfo.name.split("/")
        if "__pycache__" in parts or tarinfo.name.endswith(".pyc"):
            return None
        return tarinfo

    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for entry in ("pyproject.toml", "README.md", "dltrain", "backend", "tests"):
            p = os.path.join(HERE, entry)
            if os.path.exists(p):
                tar.add(p, arcname="%s/%s" % (base, entry), filter=skip)
        for entry in _SDIST_C_PATHS:
            p = os.path.join(root, entry)
            if os.path.exists(p):
                tar.add(p, arcname="%s/libdltrain/%s" % (base, entry), filter=skip)
        info = tarfile.TarInfo("%s/PKG-INFO" % base)
        data = meta.encode("utf-8")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return os.path.basename(path)
