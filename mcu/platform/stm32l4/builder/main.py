"""SCons builder of the tinyol-stm32l4 dev-platform: bare metal, system arm-none-eabi-gcc."""
import os
import re
import shutil
import subprocess
import sys

from SCons.Script import AlwaysBuild, Default, DefaultEnvironment

env = DefaultEnvironment()
platform = env.PioPlatform()
board = env.BoardConfig()
board_id = env.subst("$BOARD")
sys.path.insert(0, os.path.join(platform.get_dir(), "..", "common"))
import tinyol_build  # noqa: E402
import tinyol_upload  # noqa: E402

prefix = "arm-none-eabi-"
if not shutil.which(prefix + "gcc"):
    sys.stderr.write(
        "tinyol: arm-none-eabi-gcc not found on PATH.\n"
        "  Debian/Ubuntu: apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi binutils-arm-none-eabi\n"
        "  (or run `make setup`, which installs it). See README: 'Toolchain'.\n")
    env.Exit(1)

env.Replace(
    AR=prefix + "ar", AS=prefix + "gcc", CC=prefix + "gcc", CXX=prefix + "g++", LINK=prefix + "gcc",
    OBJCOPY=prefix + "objcopy", RANLIB=prefix + "ranlib", SIZETOOL=prefix + "size",
    PROGNAME="firmware", PROGSUFFIX=".elf",
)
cpu = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]
ld_dir = os.path.join(tinyol_build.mcu_dir(env), "boards", "stm32l4", "ld")
env.Append(
    ASFLAGS=cpu, CCFLAGS=cpu,
    LINKFLAGS=cpu + ["-nostartfiles", "--specs=nano.specs", "-Wl,--gc-sections", "-L" + ld_dir,
                     "-Wl,-Map=" + os.path.join("$BUILD_DIR", "firmware.map"), "-Wl,--print-memory-usage"],
    LIBS=["m"],
)
env.Replace(LDSCRIPT_PATH=os.path.join(ld_dir, board.get("build.ldscript")))
regions = {"RAM": board.get("upload.maximum_ram_size"), "RAM2": board.get("tinyol.ram2_size")}
if board.get("tinyol.ram3_size", 0):
    regions["RAM3"] = board.get("tinyol.ram3_size")
tinyol_build.configure(env, "stm32l4", board_id, regions=regions,
                       flash_bytes=board.get("upload.maximum_size"))

elf = env.BuildProgram()
bin_file = env.Command(os.path.join("$BUILD_DIR", "firmware.bin"), elf,
                       "$OBJCOPY -O binary $SOURCE $TARGET")


def report_size(target, source, env):
    """Print flash/RAM use against the board and fail clearly when over."""
    out = subprocess.check_output([env.subst("$SIZETOOL"), "-A", str(target[0])], text=True)
    sec = {m[1]: int(m[2]) for m in re.finditer(r"^(\.\S+)\s+(\d+)\s+\d+", out, re.M)}
    flash = sum(sec.get(s, 0) for s in (".isr_vector", ".text", ".ARM.exidx", ".data"))
    ram = sum(sec.get(s, 0) for s in (".data", ".bss", ".noinit", ".stack"))  # .stack: the reservation
    ram2 = sec.get(".ram2", 0)
    limits = [("flash", flash, board.get("upload.maximum_size")),
              ("RAM (SRAM1, incl. 8 KB stack)", ram, board.get("upload.maximum_ram_size")),
              ("RAM2 (SRAM2)", ram2, board.get("tinyol.ram2_size"))]
    if board.get("tinyol.ram3_size", 0):
        limits.append(("RAM3 (SRAM3)", sec.get(".ram3", 0), board.get("tinyol.ram3_size")))
    bad = False
    for name, used, total in limits:
        pct = 100.0 * used / total
        print("tinyol: %-30s %8d / %8d bytes (%5.1f%%)" % (name, used, total, pct))
        if used > total:
            print("tinyol: error: %s over by %d bytes on %s" % (name, used - total, board_id))
            bad = True
    return 1 if bad else None


env.AddPostAction(elf, env.Action(report_size, "tinyol: memory use of firmware.elf"))
Default([elf, bin_file])

protocol = os.environ.get("TINYOL_UPLOAD_PROTOCOL") or env.subst("$UPLOAD_PROTOCOL") or board.get("upload.protocol")


def do_upload(target, source, env):
    port = env.subst("$UPLOAD_PORT") or None
    try:
        argv = tinyol_upload.upload_command(
            protocol, board_id, str(source[0]), str(elf[0]), port,
            board.get("upload.openocd_target"), board.get("upload.pyocd_target"))
    except ValueError as e:
        sys.stderr.write("tinyol: %s\n" % e)
        return 1
    if not shutil.which(argv[0]):
        sys.stderr.write("tinyol: upload tool %r not found; install it or choose another method "
                         "with upload_protocol (%s)\n" % (argv[0], ", ".join(tinyol_upload.PROTOCOLS)))
        return 1
    print(" ".join(argv))
    return subprocess.call(argv)


AlwaysBuild(env.Alias("upload", bin_file, do_upload))
