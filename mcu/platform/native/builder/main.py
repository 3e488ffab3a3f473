"""SCons builder of the tinyol-native dev-platform: the firmware as a host process."""
import os
import shutil
import sys

from SCons.Script import Default, DefaultEnvironment

env = DefaultEnvironment()
platform = env.PioPlatform()
sys.path.insert(0, os.path.join(platform.get_dir(), "..", "common"))
import tinyol_build  # noqa: E402

cc = os.environ.get("CC", "gcc")
if not shutil.which(cc):
    sys.stderr.write("tinyol: host C compiler %r not found (apt-get install gcc)\n" % cc)
    env.Exit(1)
env.Replace(CC=cc, LINK=cc, PROGNAME="firmware", PROGSUFFIX="")
env.Append(CPPDEFINES=["_GNU_SOURCE"], LIBS=["m", "util"])
tinyol_build.configure(env, "native", "native")
Default(env.BuildProgram())
