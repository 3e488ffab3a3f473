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

    mcu = os.path.join(project, "mcu")
    board_dir = os.path.join(mcu, "boards", family)
    env.Append(
        CPPPATH=[os.path.join(mcu, "include"), board_dir, model_dir],
        CPPDEFINES=[("TOL_TEST_BUILD", int(test_build)), ("TOL_KERNELS_SIMD", int(kernels == "simd"))],
        CCFLAGS=["-O2", "-g", "-ffunction-sections", "-fdata-sections"] + STRICT,
        CFLAGS=["-std=c11"] + CORE_STRICT,
    )
    src = ["-<*>", "+<src/>", "-<src/kernels/>", "+<src/kernels/%s/>" % kernels, "+<app/main.c>"]
    if os.path.isfile(os.path.join(model_dir, "backbone.h")):
        # a model directory without backbone.h brings its own glue; one with an adaptive
        # stage (export --split before the head: stage_init.c) uses the stage glue
        staged = os.path.isfile(os.path.join(model_dir, "stage_init.c"))
        src.append("+<app/model_stage.c>" if staged else "+<app/model.c>")
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
    print("tinyol: model=%s kernels=%s test_build=%s" % (os.path.relpath(model_dir, project), kernels,
                                                       "yes" if test_build else "no"))
    return {"model_dir": model_dir, "kernels": kernels, "test_build": test_build}
