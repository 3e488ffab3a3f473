"""How each upload method flashes a tinyol image (shared by the PlatformIO
builder and `tinyol flash --dry-run`, so the command shown is the one run).

No SCons or PlatformIO imports here: plain functions over paths.
"""
import glob
import os

PROTOCOLS = ("stlink", "openocd", "pyocd", "mbed")
FLASH_BASE = 0x08000000


def upload_command(protocol, board_id, bin_path, elf_path, port=None, openocd_target="stm32l4x",
                   pyocd_target=None):
    """Return the argv list that flashes the image, or raise ValueError."""
    if protocol == "stlink":
        argv = ["st-flash", "--reset"]
        if port:
            argv += ["--serial", port]
        return argv + ["write", bin_path, "0x%08x" % FLASH_BASE]
    if protocol == "openocd":
        argv = ["openocd", "-f", "interface/stlink.cfg"]
        if port:
            argv += ["-c", "adapter serial %s" % port]
        return argv + ["-f", "target/%s.cfg" % openocd_target,
                       "-c", "program {%s} verify reset exit" % elf_path]
    if protocol == "pyocd":
        argv = ["pyocd", "flash", "--target", pyocd_target or board_id]
        if port:
            argv += ["--uid", port]
        return argv + [elf_path]
    if protocol == "mbed":
        disk = port or find_mbed_disk(board_id)
        if not disk:
            raise ValueError("no Nucleo mass-storage drive found (mounted folder with MBED.HTM); "
                             "mount it or pass --port /media/$USER/NODE_...")
        return ["cp", bin_path, os.path.join(disk, os.path.basename(bin_path))]
    raise ValueError("unknown upload protocol %r (choose one of %s)" % (protocol, ", ".join(PROTOCOLS)))


def find_mbed_disk(board_id):
    """The ST-Link's USB drive (it holds MBED.HTM or DETAILS.TXT), if one is mounted."""
    for pattern in ("/media/*/*", "/media/*", "/run/media/*/*", "/Volumes/*"):
        for d in sorted(glob.glob(pattern)):
            if os.path.isfile(os.path.join(d, "MBED.HTM")) or os.path.isfile(os.path.join(d, "DETAILS.TXT")):
                return d
    return None
