"""Build logic shared by our two offline dev-platforms (stm32l4, native).

Which files make a firmware (portable core, app, board HAL, kernels, model)
is decided here, by file selection, so no C file needs a feature #ifdef.
Project options read from platformio.ini (all optional):
  custom_model   = models/digits      model directory from `tinyol export`
                                      (mcu/app/nomodel: firmware without a model)
  custom_kernels = simd | ref          int8 kernel implementation
  custom_test_build = yes | no         semihosting exit + EXIT message
Environment overrides (used by `tinyol build`): TINYOL_MODEL, TINYOL_KERNELS,
TINYOL_TEST_BUILD.
"""
import os

STRICT = ["-Wall", "-Wextra", "-Werror", "-Wshadow"]
CORE_STRICT = ["-Wconversion", "-Wdouble-promotion"]


def option(env, name, default, env_var):
    value = os.environ.get(env_var)
    if value:
        return value
    return env.GetProjectOption(name, default)


def mcu_dir(env):
    """The firmware sources: this dev-platform lives in <mcu>/platform/<family>, wherever
    tinyol is (a checkout, or tinyol/_firmware inside an installed package)."""
    return os.path.realpath(os.path.join(env.PioPlatform().get_dir(), "..", ".."))


def configure(env, family, board_id):
    project = env.subst("$PROJECT_DIR")
    model = option(env, "custom_model", "mcu/app/nomodel", "TINYOL_MODEL")
    model_dir = model if os.path.isabs(model) else os.path.join(project, model)
    if not os.path.isfile(os.path.join(model_dir, "config.h")):
        raise SystemExit("tinyol: model directory %s has no config.h (run `tinyol export`)" % model_dir)
    kernels = option(env, "custom_kernels", "simd" if family == "stm32l4" else "ref", "TINYOL_KERNELS")
    if kernels not in ("simd", "ref"):
        raise SystemExit("tinyol: custom_kernels must be simd or ref, not %r" % kernels)
    test_build = option(env, "custom_test_build", "no", "TINYOL_TEST_BUILD").lower() in ("1", "yes", "true")

    mcu = mcu_dir(env)
    if os.path.realpath(env.subst("$PROJECT_SRC_DIR")) != mcu:
        raise SystemExit("tinyol: src_dir must be the firmware sources %s (platformio.ini [platformio] "
                         "src_dir); `tinyol init` writes it" % mcu)
    board_dir = os.path.join(mcu, "boards", family)
    env.Append(
        CPPPATH=[os.path.join(mcu, "include"), board_dir, model_dir],
        CPPDEFINES=[("TOL_TEST_BUILD", int(test_build)), ("TOL_KERNELS_SIMD", int(kernels == "simd"))],
        CCFLAGS=["-O2", "-g", "-ffunction-sections", "-fdata-sections"] + STRICT,
        CFLAGS=["-std=c11"] + CORE_STRICT,
    )
    src = ["-<*>", "+<src/>", "-<src/kernels/>", "+<src/kernels/%s/>" % kernels, "+<app/main.c>"]
    if os.path.isfile(os.path.join(model_dir, "backbone.h")):
        src.append("+<app/model.c>")  # a model directory without backbone.h brings its own glue
    if family == "stm32l4":
        exit_impl = "exit_semihost.c" if test_build else "exit_reset.c"
        src += ["+<boards/stm32l4/startup.c>", "+<boards/stm32l4/hal_stm32l4.c>",
                "+<boards/stm32l4/flash_stm32l4.c>",
                "+<boards/stm32l4/%s>" % exit_impl, "+<boards/stm32l4/board_%s.c>" % board_id]
    else:
        src += ["+<boards/native/>"]
    env.Replace(SRC_FILTER=src)
    # the model's generated C (weights, head init); model_data.c is the TFLM
    # flatbuffer for users who run TFLM, not needed by our AOT backbone
    env.BuildSources(os.path.join("$BUILD_DIR", "model"), model_dir, src_filter=["+<*.c>", "-<model_data.c>"])
    shown = os.path.relpath(model_dir, project) if model_dir.startswith(project + os.sep) else model_dir
    print("tinyol: model=%s kernels=%s test_build=%s" % (shown, kernels,
                                                       "yes" if test_build else "no"))
    return {"model_dir": model_dir, "kernels": kernels, "test_build": test_build}
