"""Build logic shared by our two offline dev-platforms (stm32l4, native).

Which files make a firmware (portable core, app, board HAL, kernels, model)
is decided here, by file selection, so no C file needs a feature #ifdef.
Project options read from platformio.ini (all optional):
  custom_model   = models/digits      model directory from `tinyol export`
                                      (mcu/app/nomodel: firmware without a model)
  custom_kernels = simd | ref          int8 kernel implementation
  custom_test_build = yes | no         semihosting exit + EXIT message
  custom_app     = tinyol | imu        tinyol: the protocol firmware (host streams samples);
                                      imu: the board's own IMU feeds the learner (mcu/app/imu,
                                      docs/sensor.md; needs TINYOL_APP_INCLUDE, the folder
                                      holding the imu_config.h `tinyol build --app imu` writes)
  custom_tinyol_firmware = yes | no   no: the project is your own firmware (its
                                      src_dir, the tinyol library via lib_deps);
                                      the platform adds only the board support
                                      (startup, linker script, clock, UART, flash
                                      HAL; entry point tol_server_main), see
                                      examples/sensor_learner
  custom_store_bytes = N               the persistence store region (TOL_STORE_BYTES, default
                                      the last 1/8 of flash; a multiple of two pages)
Environment overrides (used by `tinyol build`): TINYOL_MODEL, TINYOL_KERNELS,
TINYOL_TEST_BUILD, TINYOL_APP, TINYOL_STORE_BYTES.
"""
import importlib.util
import json
import os
import shutil
import sys

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


def board_support(env, family, board_id, test_build):
    """Only the board's startup/HAL, for a user firmware that links tinyol as a library."""
    mcu = mcu_dir(env)
    board_dir = os.path.join(mcu, "boards", family)
    env.Append(
        CPPPATH=[os.path.join(mcu, "include"), board_dir],
        CPPDEFINES=[("TOL_TEST_BUILD", int(test_build))],
        CCFLAGS=["-O2", "-g", "-ffunction-sections", "-fdata-sections"] + STRICT,
        CFLAGS=["-std=c11"],
    )
    if family == "stm32l4":
        exit_impl = "exit_semihost.c" if test_build else "exit_reset.c"
        files = ["startup.c", "hal_stm32l4.c", "flash_stm32l4.c", "i2c_stm32l4.c", exit_impl,
                 "board_%s.c" % board_id]
    else:
        files = ["*.c"]
    env.BuildSources(os.path.join("$BUILD_DIR", "board"), board_dir, src_filter=["-<*>"] + ["+<%s>" % f for f in files])
    print("tinyol: board support %s/%s for your firmware (test_build=%s)" % (family, board_id,
                                                                              "yes" if test_build else "no"))
    return {"model_dir": None, "kernels": None, "test_build": test_build}


def load_memory_model(mcu):
    """tinyol's memory model (memory.py, standard library only), loaded by path: the same model
    `tinyol export` checks with. In a checkout it is host/tinyol/memory.py next to mcu/; in an
    installed package, tinyol/memory.py above tinyol/_firmware/mcu. None if neither exists."""
    for path in (os.path.join(mcu, "..", "host", "tinyol", "memory.py"),
                 os.path.join(mcu, "..", "..", "memory.py")):
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("tinyol_memory", path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules["tinyol_memory"] = mod  # dataclasses look their module up
            spec.loader.exec_module(mod)
            return mod
    return None


def memory_plan(mcu, model_dir, board_id, regions, flash_bytes, test_build, refuse=True):
    """Place the learner (TOL_LEARNER_REGION) and its replay buffer (TOL_REPLAY_REGION) and check
    the fit before compiling anything.

    Prints the memory summary; exits with the summary and a hint, instead of the linker's
    "region RAM overflowed", when the model does not fit. Returns the region ids (1, 2, 3) of the
    learner and of the replay buffer, or None for a model directory without a manifest (nomodel,
    hand-made models)."""
    manifest_path = os.path.join(model_dir, "manifest.json")
    if not regions or not os.path.isfile(manifest_path):
        return None
    with open(manifest_path, encoding="utf-8") as f:
        manifest = json.load(f)
    mem = load_memory_model(mcu)
    if mem is None or "memory" not in manifest or "learner" not in manifest:
        return None
    plan = mem.plan(mem.Model.from_manifest(manifest), board_id, regions, flash_bytes=flash_bytes,
                    test_build=test_build)
    forced = os.environ.get("TINYOL_LEARNER_REGION")  # tests: place it here, let the linker judge
    if forced:
        names = {"1": "RAM", "2": "RAM2", "3": "RAM3"}
        forced_replay = os.environ.get("TINYOL_REPLAY_REGION") or forced
        plan = mem.plan(plan.model, board_id, regions, flash_bytes=flash_bytes, test_build=test_build,
                        learner_region=names[forced], replay_region=names[forced_replay])
    print("tinyol: memory plan for %s (tinyol/memory.py):" % board_id)
    for line in plan.lines():
        print("tinyol:   " + line)
    if not plan.fits and not forced and refuse:
        where, over = plan.over
        print("tinyol: error: %s does not fit %s: %s over by %d bytes" % (
            manifest.get("name", "the model"), board_id, where, over))
        print("tinyol: hint: %s, then export again (or choose a board with more RAM)" % plan.advice())
        raise SystemExit(1)
    return plan.learner_region_id, plan.replay_region_id


def place(env, region):
    """The plan's regions as the C sees them: TOL_LEARNER_REGION, and TOL_REPLAY_REGION when the
    replay buffer goes to a region of its own (mcu/app/model.c; tinyol.h's *_SECTION macros)."""
    if region is not None:
        env.Append(CPPDEFINES=[("TOL_LEARNER_REGION", region[0])])
        if region[1] != region[0]:
            env.Append(CPPDEFINES=[("TOL_REPLAY_REGION", region[1])])


def compiler_cache(env):
    """Compile through ccache when it is installed (TINYOL_CCACHE=0: never). Most of a firmware's
    objects (core, kernels, board) do not depend on the model, so a new model or replay capacity
    recompiles only what includes its config.h; the cache lives in the project (.pio/ccache) unless
    CCACHE_DIR names another."""
    if os.environ.get("TINYOL_CCACHE", "1").lower() in ("0", "no", "false"):
        return
    ccache = shutil.which("ccache")
    if not ccache:
        return
    env.Replace(CC="%s %s" % (ccache, env.subst("$CC")))
    # the compilers' environment is PlatformIO's os.environ, so the user's CCACHE_* settings reach it
    env["ENV"].setdefault("CCACHE_DIR", os.path.join(env.subst("$PROJECT_DIR"), ".pio", "ccache"))


# The firmware's sources that include the model's config.h (through tinyol.h or tol_server.h):
# the glue over tinyol.h and the protocol server. Every other source (the core, the kernels, the
# boards) is compiled without the model folder on its include path, so its command line is the
# same for every model and ccache finds it without running the preprocessor (its direct mode);
# a core file that came to include config.h fails to compile, it cannot build stale.
MODEL_SOURCES = ("app/", "embed/", "src/tol_server.c")


def build_firmware_sources(env, mcu, src_filter, model_dir):
    """Compile the selected firmware sources in the order PlatformIO would (the link order, and
    so the code layout, is unchanged); only MODEL_SOURCES see `model_dir`. PlatformIO's own pass
    over src_dir is then given nothing."""
    model_free = [p for p in env["CPPPATH"] if p != model_dir]
    variant = env.subst("$BUILD_SRC_DIR")
    objects = []
    for node in env.CollectBuildFiles("$BUILD_SRC_DIR", mcu, src_filter):
        rel = os.path.relpath(node.get_abspath(), variant).replace(os.sep, "/")
        needs_model = rel.startswith(MODEL_SOURCES)
        objects.append(env.Object(node) if needs_model else env.Object(node, CPPPATH=model_free))
    from SCons.Script import DefaultEnvironment  # noqa: PLC0415 (SCons only inside a build)

    DefaultEnvironment().Append(PIOBUILDFILES=objects)   # where env.BuildSources puts its objects
    env.Replace(SRC_FILTER=["-<*>"])


def configure(env, family, board_id, regions=None, flash_bytes=0):
    project = env.subst("$PROJECT_DIR")
    test_build = option(env, "custom_test_build", "no", "TINYOL_TEST_BUILD").lower() in ("1", "yes", "true")
    if option(env, "custom_tinyol_firmware", "yes", "TINYOL_FIRMWARE").lower() in ("0", "no", "false"):
        # your firmware over tinyol.h: the plan's placement for its TINYOL_LEARNER_SECTION /
        # TINYOL_REPLAY_SECTION (the plan counts tinyol's own firmware; yours is the linker's to judge)
        model = option(env, "custom_model", "", "TINYOL_MODEL")
        if model:
            model_dir = model if os.path.isabs(model) else os.path.join(project, model)
            place(env, memory_plan(mcu_dir(env), model_dir, board_id, regions, flash_bytes, test_build,
                                   refuse=False))
        return board_support(env, family, board_id, test_build)
    model = option(env, "custom_model", "mcu/app/nomodel", "TINYOL_MODEL")
    model_dir = model if os.path.isabs(model) else os.path.join(project, model)
    if not os.path.isfile(os.path.join(model_dir, "config.h")):
        raise SystemExit("tinyol: model directory %s has no config.h (run `tinyol export`)" % model_dir)
    kernels = option(env, "custom_kernels", "simd" if family == "stm32l4" else "ref", "TINYOL_KERNELS")
    if kernels not in ("simd", "ref"):
        raise SystemExit("tinyol: custom_kernels must be simd or ref, not %r" % kernels)

    mcu = mcu_dir(env)
    if os.path.realpath(env.subst("$PROJECT_SRC_DIR")) != mcu:
        raise SystemExit("tinyol: src_dir must be the firmware sources %s (platformio.ini [platformio] "
                         "src_dir); `tinyol init` writes it" % mcu)
    place(env, memory_plan(mcu, model_dir, board_id, regions, flash_bytes, test_build))
    store = option(env, "custom_store_bytes", "", "TINYOL_STORE_BYTES")
    if store:
        if not str(store).isdigit() or int(store) <= 0:
            raise SystemExit("tinyol: custom_store_bytes / TINYOL_STORE_BYTES must be a byte count, not %r" % store)
        if family == "stm32l4":  # the linker script checks it is a multiple of two pages
            env.Append(LINKFLAGS=["-Wl,--defsym=TOL_STORE_BYTES=%d" % int(store)])
        print("tinyol: persistence store: %d bytes (TOL_STORE_BYTES)" % int(store))
    board_dir = os.path.join(mcu, "boards", family)
    compiler_cache(env)
    env.Append(
        CPPPATH=[os.path.join(mcu, "include"), board_dir, model_dir],
        CPPDEFINES=[("TOL_TEST_BUILD", int(test_build)), ("TOL_KERNELS_SIMD", int(kernels == "simd"))],
        CCFLAGS=["-O2", "-g", "-ffunction-sections", "-fdata-sections"] + STRICT,
        CFLAGS=["-std=c11"] + CORE_STRICT,
    )
    app = option(env, "custom_app", "tinyol", "TINYOL_APP")
    if app not in ("tinyol", "imu"):
        raise SystemExit("tinyol: custom_app must be tinyol or imu, not %r" % app)
    src = ["-<*>", "+<src/>", "-<src/kernels/>", "+<src/kernels/%s/>" % kernels]
    if app == "imu":
        # the sensor firmware over tinyol.h: no protocol app, the IMU driver (I2C) or a file
        inc = os.environ.get("TINYOL_APP_INCLUDE")
        if not inc or not os.path.isfile(os.path.join(inc, "imu_config.h")):
            raise SystemExit("tinyol: custom_app = imu needs TINYOL_APP_INCLUDE, a folder with "
                             "imu_config.h (`tinyol build --app imu` writes it)")
        env.Append(CPPPATH=[inc])
        src += ["-<src/tol_server.c>", "+<embed/>", "+<app/imu/main.c>"]
        src += (["+<app/imu/imu_lsm6dsx.c>", "+<boards/stm32l4/i2c_stm32l4.c>"] if family == "stm32l4"
                else ["+<app/imu/imu_file.c>"])
        env.Append(CPPPATH=[os.path.join(mcu, "app", "imu")])
    else:
        src += ["+<app/main.c>"]
    if app == "tinyol" and os.path.isfile(os.path.join(model_dir, "backbone.h")):
        # a model directory without backbone.h brings its own glue; the one glue (model.c)
        # drives the learner of the export: the adaptive stage when the directory has
        # stage_init.c (export --split before the head), else the one-layer head
        # with its pull/push payloads (wire_*.c); both over tinyol.h (embed/tinyol.c: the
        # input rounding, the saved parts, the settings, the model's checks; embed/tinyol_stage.c
        # or embed/tinyol_head.c: the learner's configuration)
        if os.path.isfile(os.path.join(model_dir, "stage_init.c")):
            src += ["+<app/model.c>", "+<app/learner_stage.c>", "+<app/wire_stage.c>", "+<embed/tinyol.c>",
                    "+<embed/tinyol_stage.c>"]
        else:
            src += ["+<app/model.c>", "+<app/learner_head.c>", "+<app/wire_head.c>", "+<embed/>"]
    if family == "stm32l4":
        exit_impl = "exit_semihost.c" if test_build else "exit_reset.c"
        src += ["+<boards/stm32l4/startup.c>", "+<boards/stm32l4/hal_stm32l4.c>",
                "+<boards/stm32l4/flash_stm32l4.c>",
                "+<boards/stm32l4/%s>" % exit_impl, "+<boards/stm32l4/board_%s.c>" % board_id]
    else:
        src += ["+<boards/native/>"]
    # the model's generated C (weights, head init); model_data.c is the TFLM
    # flatbuffer for users who run TFLM, not needed by our AOT backbone
    env.BuildSources(os.path.join("$BUILD_DIR", "model"), model_dir, src_filter=["+<*.c>", "-<model_data.c>"])
    build_firmware_sources(env, mcu, src, model_dir)
    shown = os.path.relpath(model_dir, project) if model_dir.startswith(project + os.sep) else model_dir
    print("tinyol: model=%s kernels=%s test_build=%s app=%s" % (shown, kernels,
                                                              "yes" if test_build else "no", app))
    return {"model_dir": model_dir, "kernels": kernels, "test_build": test_build}
