"""PlatformIO extra script of the tinyol library (library.json; docs/embedding.md).

The library's fixed sources (portable core, tinyol.h API) are in library.json.
This script adds what depends on your project:
  custom_model   = models/my_model   the directory `tinyol export` wrote (relative
                                     to the project); required
  custom_kernels = simd | ref         int8 kernels: simd (Cortex-M4/M7 DSP
                                     instructions; the default when compiling
                                     with -mcpu=cortex-m4/m7) or ref (any CPU)
Environment overrides: TINYOL_MODEL, TINYOL_KERNELS.
The model directory goes on the include path of the library and of your
sources (for config.h through tinyol.h); its .c files are compiled here.
"""
import os

Import("env", "pio_lib_builder")  # noqa: F821  (SCons names)
from SCons.Script import DefaultEnvironment  # noqa: E402

lib_dir = pio_lib_builder.path  # noqa: F821
project_env = DefaultEnvironment()
project = env.subst("$PROJECT_DIR")  # noqa: F821


def option(name, env_var, default=None):
    return os.environ.get(env_var) or env.GetProjectOption(name, default)  # noqa: F821


model = option("custom_model", "TINYOL_MODEL")
if not model:
    raise SystemExit("tinyol library: set custom_model = <directory from `tinyol export`> in "
                     "platformio.ini (see docs/embedding.md)")
model_dir = model if os.path.isabs(model) else os.path.join(project, model)
if not os.path.isfile(os.path.join(model_dir, "backbone.h")):
    raise SystemExit("tinyol library: %s has no backbone.h (a directory written by `tinyol export`)"
                     % model_dir)
flags = " ".join(str(f) for f in project_env.get("CCFLAGS", []))
dsp = "-mcpu=cortex-m4" in flags or "-mcpu=cortex-m7" in flags or "-mcpu=cortex-m33" in flags
kernels = option("custom_kernels", "TINYOL_KERNELS", "simd" if dsp else "ref")
if kernels not in ("simd", "ref"):
    raise SystemExit("tinyol library: custom_kernels must be simd or ref, not %r" % kernels)

for e in (env, project_env):  # noqa: F821
    e.Append(CPPPATH=[model_dir, os.path.join(lib_dir, "include")])
env.Append(CFLAGS=["-Wall", "-Wextra", "-Werror", "-Wconversion", "-Wdouble-promotion"])  # noqa: F821
env.BuildSources(os.path.join("$BUILD_DIR", "tinyol_kernels"),  # noqa: F821
                 os.path.join(lib_dir, "src", "kernels", kernels), src_filter=["+<*.c>"])
env.BuildSources(os.path.join("$BUILD_DIR", "tinyol_model"), model_dir,  # noqa: F821
                 src_filter=["+<*.c>", "-<model_data.c>"])
print("tinyol library: model=%s kernels=%s" % (model_dir, kernels))
