# tinyol: STM32L4 GPIO ports A..I for Renode (Python.PythonPeripheral at 0x48000000, 0x2400
# bytes: nine ports of 0x400), and the wire between the console UART and its terminal.
#
# Registers (RM0351 / RM0432 section 8.4): MODER, OTYPER, OSPEEDR, PUPDR, ODR, LCKR, AFRL, AFRH,
# ASCR read back what was written (reset values of port A and B differ: debug pins);
# BSRR/BRR set and reset ODR bits and read 0; IDR reads 0 (no pin is driven from outside).
#
# The wire: the .resc connects the console U(S)ART to a socket terminal. On its first access
# this script takes that connection over and passes each byte only as the silicon would:
#   - the pins: the board's console TX/RX pins must be in alternate-function mode (MODER = 10)
#     with the alternate function of the datasheet (table below); on port G (L4R5)
#     PWR_CR2.IOSV must be set (VDDIO2). Otherwise nothing crosses (the line stays idle).
#   - the timing: the UART's baud is its clock (the SYSCLK the RCC stand-in reports at
#     RCC+0x3F0, read on GPIO accesses; APB prescalers at 1) over BRR (x 256 for LPUART1,
#     read as each byte is sent; received bytes use the last value); the host side runs at
#     HOST_BAUD. Each byte is sent as a 10-bit frame at one rate and sampled mid-bit at the
#     other, as a UART receiver does: a few percent of mismatch still decodes, more garbles
#     the byte or drops it (framing error). Both directions.
# Diagnostics (reserved words of port A): +0x3F0 reads 1 when the console pins are right,
# +0x3F4 the device-side baud of the last byte, +0x3F8 bytes passed, +0x3FC bytes garbled or
# dropped.
#
# Runs in Renode's IronPython 2; imports only Renode's own .NET names (clr, Antmicro.*)
# and only inside the take-over (the register logic and the wire maths are plain functions
# the CPython tests in tests/host/test_renode_link.py drive). ASCII only.

GPIO_BASE = 0x48000000
PORT_SIZE = 0x400
PORTS = "ABCDEFGHI"
MODER, OTYPER, OSPEEDR, PUPDR, IDR, ODR, BSRR, LCKR, AFRL, AFRH, BRR, ASCR = (
    0x00, 0x04, 0x08, 0x0C, 0x10, 0x14, 0x18, 0x1C, 0x20, 0x24, 0x28, 0x2C)
DIAG_PINS, DIAG_BAUD, DIAG_PASSED, DIAG_GARBLED = 0x3F0, 0x3F4, 0x3F8, 0x3FC

HOST_BAUD = 115200               # the ST-LINK virtual COM port as the host opens it
RCC_DIAG_SYSCLK = 0x400213F0     # rcc.py: SYSCLK in effect
PWR_CR2 = 0x40007004
PWR_CR2_IOSV = 1 << 9
FLASHSIZE = 0x1FFF75E0

# Reset values (RM0351 8.4): port A and B hold the debug pins.
RESET = {
    "A": {MODER: 0xABFFFFFF, OSPEEDR: 0x0C000000, PUPDR: 0x64000000},
    "B": {MODER: 0xFFFFFEBF, PUPDR: 0x00000100},
}

# Console UART -> (TX pin, RX pin), pin = (port, number, alternate function), from the
# datasheets' alternate-function tables (DS10198 L476, DS10969 L475, DS11451 L432, DS12023 L4R5)
# and the boards' user manuals (which UART the ST-LINK VCP is wired to).
CONSOLES = {
    ("USART1", "L47"): (("B", 6, 7), ("B", 7, 7)),     # B-L475E-IOT01A
    ("USART2", "L47"): (("A", 2, 7), ("A", 3, 7)),     # NUCLEO-L476RG
    ("USART2", "L43"): (("A", 2, 7), ("A", 15, 3)),    # NUCLEO-L432KC
    ("LPUART1", "L4R"): (("G", 7, 8), ("G", 8, 8)),    # NUCLEO-L4R5ZI
}
UARTS = {"USART1": 0x40013800, "USART2": 0x40004400, "USART3": 0x40004800, "LPUART1": 0x40008000}


def gpio_reset():
    regs = {}
    for port in PORTS:
        for offset in (MODER, OTYPER, OSPEEDR, PUPDR, ODR, LCKR, AFRL, AFRH, ASCR):
            regs[(port, offset)] = RESET.get(port, {}).get(offset, 0xFFFFFFFF if offset == MODER else 0)
    regs["diag"] = {DIAG_PINS: 0, DIAG_BAUD: 0, DIAG_PASSED: 0, DIAG_GARBLED: 0}
    return regs


def gpio_read(regs, offset):
    port = PORTS[offset // PORT_SIZE]
    reg = offset % PORT_SIZE
    if port == "A" and reg in regs["diag"]:
        return regs["diag"][reg]
    if reg in (IDR, BSRR, BRR):
        return 0
    return regs.get((port, reg), 0)


def gpio_write(regs, offset, value):
    port = PORTS[offset // PORT_SIZE]
    reg = offset % PORT_SIZE
    if reg == BSRR:
        odr = regs[(port, ODR)]
        regs[(port, ODR)] = ((odr | (value & 0xFFFF)) & ~(value >> 16)) & 0xFFFF
    elif reg == BRR:
        regs[(port, ODR)] = regs[(port, ODR)] & ~(value & 0xFFFF)
    elif reg == IDR or (port == "A" and reg in regs["diag"]):
        pass
    elif (port, reg) in regs:
        regs[(port, reg)] = value & 0xFFFFFFFF


def pin_in_af(regs, pin):
    """Is (port, number, af) in alternate-function mode with that function?"""
    port, n, af = pin
    mode = (regs[(port, MODER)] >> (2 * n)) & 3
    afr = regs[(port, AFRL if n < 8 else AFRH)]
    return mode == 2 and ((afr >> (4 * (n & 7))) & 0xF) == af


def console_pins_ok(regs, pins, iosv):
    """Both console pins in their alternate function (and VDDIO2 valid for port G)."""
    for pin in pins:
        if not pin_in_af(regs, pin):
            return False
        if pin[0] == "G" and not iosv:
            return False
    return True


def uart_baud(clock_hz, brr, lpuart):
    if brr == 0:
        return 0
    if lpuart:
        return (clock_hz * 256 + brr // 2) // brr
    return (clock_hz + brr // 2) // brr


def resample(byte, tx_baud, rx_baud):
    """The byte a receiver at rx_baud decodes from a frame sent at tx_baud (8N1, idle line
    before it), or None on a framing error (stop bit sampled low)."""
    if tx_baud <= 0 or rx_baud <= 0:
        return None
    bits = [0] + [(byte >> i) & 1 for i in range(8)] + [1]

    def level(k):       # line level at the receiver's sample k (k + 0.5 bit times after the start edge)
        index = int((k + 0.5) * tx_baud // rx_baud)   # whole transmitter bit periods elapsed
        if index < len(bits):
            return bits[index]
        return 1        # idle after the frame
    if level(0) != 0:
        return None     # start bit not confirmed mid-bit
    value = 0
    for i in range(8):
        value |= level(i + 1) << i
    if level(9) != 1:
        return None
    return value


def wire(byte, device_baud, pins_ok, to_host):
    """What crosses the wire for one byte: a byte, or None (nothing decodes)."""
    if not pins_ok:
        return None
    if to_host:
        return resample(byte, device_baud, HOST_BAUD)
    return resample(byte, HOST_BAUD, device_baud)


def part_of(flashsize_kb):
    if flashsize_kb >= 2048:
        return "L4R"
    if flashsize_kb <= 256:
        return "L43"
    return "L47"


# ---- Renode: taking over the console connection ---------------------------------------

def _take_over(state):
    """Find the console UART (the one connected to a terminal), disconnect it and pass its
    bytes through `wire`. Runs once per emulation (kept across machine resets)."""
    import clr  # noqa: F401  (Renode's IronPython: .NET names, not the standard library)
    from Antmicro.Renode.Core import EmulationManager
    machine = self.GetMachine()
    bus = machine.SystemBus
    emulation = EmulationManager.Instance.CurrentEmulation
    connector = emulation.Connector
    part = part_of(bus.ReadWord(FLASHSIZE))
    links = []          # (terminal, peripheral) pairs the .resc connected
    for ext in emulation.ExternalsManager.Externals:
        try:
            for obj in connector.GetObjectsConnectedTo(ext):
                links.append((ext, obj))
        except Exception:
            pass        # not a connectable external (e.g. the host machine)
    for name in UARTS:
        if (name, part) not in CONSOLES:
            continue
        uart = bus.WhatPeripheralIsAt(UARTS[name])
        terminal = None
        for ext, obj in links:
            if obj is uart or obj.Equals(uart):
                terminal = ext
        if terminal is None:
            continue
        connector.Disconnect(uart, terminal)
        pins = CONSOLES[(name, part)]
        lpuart = name == "LPUART1"
        base = UARTS[name]

        def count(out):
            d = tol_gpio["diag"]
            if out is None:
                d[DIAG_GARBLED] = d[DIAG_GARBLED] + 1
            else:
                d[DIAG_PASSED] = d[DIAG_PASSED] + 1

        def to_host(b):
            # the CPU's thread (a store to TDR): BRR is a cheap read of the C# UART model; the
            # clock and the pins come from `state`, refreshed on the CPU's GPIO accesses
            baud = uart_baud(state["sysclk"], bus.ReadDoubleWord(base + 0x0C), lpuart)
            state["baud"] = baud
            tol_gpio["diag"][DIAG_BAUD] = baud
            out = wire(int(b), baud, state["ok"], True)
            count(out)
            if out is not None:
                terminal.WriteChar(out)

        def to_device(b):
            # the terminal's socket thread: never touches the bus (the other peripherals'
            # scripts are not re-entrant); uses what the CPU's thread last saw
            out = wire(int(b), state["baud"], state["ok"], False)
            count(out)
            if out is not None:
                uart.WriteChar(out)

        uart.CharReceived += to_host
        terminal.CharReceived += to_device
        state["console"] = (name, pins)
        state["bus"] = bus
        state["baud"] = 0
        state["sysclk"] = 0
        state["ok"] = False
        return


def _refresh(state):
    """On the CPU's thread (a GPIO access): the clock, VDDIO2 and the console pins as they are
    now. The firmware sets the clock and IOSV before its pins, and BRR after them (read per
    byte in to_host)."""
    bus = state["bus"]
    state["sysclk"] = bus.ReadDoubleWord(RCC_DIAG_SYSCLK)
    iosv = bus.ReadDoubleWord(PWR_CR2) & PWR_CR2_IOSV
    state["ok"] = console_pins_ok(tol_gpio, state["console"][1], iosv)
    tol_gpio["diag"][DIAG_PINS] = 0
    if state["ok"]:
        tol_gpio["diag"][DIAG_PINS] = 1


def _req(name):
    if hasattr(request, name):
        return getattr(request, name)
    return getattr(request, name[0].upper() + name[1:])


def _set_value(value):
    if hasattr(request, "value"):
        request.value = value
    else:
        request.Value = value


def _access(state, read, write, zero_merge):
    """Route one request to `read`/`write`, splitting byte and half-word accesses."""
    offset = int(_req("offset"))
    aligned = offset & ~3
    shift = (offset & 3) * 8
    try:
        length = int(_req("length"))
    except AttributeError:
        length = 4
    if length <= 0 or length > 4:
        length = 4
    mask = (1 << (8 * length)) - 1
    if _req("isRead"):
        _set_value((read(state, aligned) >> shift) & mask)
    elif _req("isWrite"):
        value = int(_req("value")) & mask
        if length < 4:
            base = 0
            if aligned not in zero_merge:
                base = read(state, aligned) & ~(mask << shift)
            value = base | (value << shift)
        write(state, aligned, value & 0xFFFFFFFF)


try:
    tol_gpio
except NameError:
    tol_gpio = None
try:
    tol_gpio_wire
except NameError:
    tol_gpio_wire = {}

if tol_gpio is None or _req("isInit"):
    tol_gpio = gpio_reset()
    if tol_gpio_wire.get("console"):
        tol_gpio_wire["ok"] = False     # a reset puts the pins back to analog mode
if not _req("isInit"):
    if "console" not in tol_gpio_wire:
        tol_gpio_wire["console"] = None
        try:
            _take_over(tol_gpio_wire)
        except ImportError:
            pass        # not in Renode (no .NET): registers only
        except Exception as e:
            self.ErrorLog("tinyol gpio: cannot take over the console connection: %s" % e)
    _access(tol_gpio, gpio_read, gpio_write, ())
    if tol_gpio_wire.get("console"):
        _refresh(tol_gpio_wire)
