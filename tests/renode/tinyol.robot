*** Comments ***
The tinyol firmware of every board in a real Renode, driven by the tinyol CLI.

Run from the repository root (Renode >= 1.15 with renode-test; `tinyol` on PATH or given):
    renode-test tests/renode/tinyol.robot --variable TINYOL:$PWD/.venv/bin/tinyol
renode-test starts Renode, imports its keywords (Execute Command, Create Terminal Tester,
Start Emulation, Wait For Line On Uart, ...) and resets the emulation before each test.
Each test builds its board with `tinyol build` (cached) and uses its own socket port.
tests/device/test_renode_real.py (test_robot_suite_passes_in_renode) runs this from `make test`
with `--exclude full`, to keep its time down: the `full` cases (persistence on the other three
boards, bit-exactness and learning on the L476) are checked in Python there, more tightly.

Without Renode the suite can only be dry-run; the keywords then come from a stub library:
    robot --dryrun --output NONE --report NONE --log NONE \
        --variable TOL_RENODE_KEYWORDS:tests/renode/dryrun/renode_keywords.resource \
        tests/renode/tinyol.robot
(tests/host/test_renode_static.py does exactly that.)
The power-cut sweep needs instruction-exact pauses driven from Python: it is in
tests/device/test_renode_real.py, not here.


*** Settings ***
Documentation       tinyol firmware on each STM32L4 board modelled in mcu/renode/.
Resource            ${CURDIR}/tinyol.resource
Resource            ${TOL_RENODE_KEYWORDS}


*** Variables ***
# Where Renode's keywords come from: renode-test supplies them itself, so by default this
# re-imports tinyol.resource (a no-op); a dry run points it at the stub resource.
${TOL_RENODE_KEYWORDS}      ${CURDIR}/tinyol.resource


*** Test Cases ***
NUCLEO-L476RG Boots
    [Template]    Firmware Boots And Answers INFO
    nucleo_l476rg           sysbus.usart2      3461

NUCLEO-L432KC Boots
    [Template]    Firmware Boots And Answers INFO
    nucleo_l432kc           sysbus.usart2      3462

B-L475E-IOT01A Boots
    [Template]    Firmware Boots And Answers INFO
    disco_l475vg_iot01a     sysbus.usart1      3463

NUCLEO-L4R5ZI Boots
    [Template]    Firmware Boots And Answers INFO
    nucleo_l4r5zi           sysbus.lpuart1     3464

NUCLEO-L476RG Keeps Its Learned State Across A Reset
    [Template]    Learned State Survives A Reset
    nucleo_l476rg           sysbus.usart2      3465

NUCLEO-L432KC Keeps Its Learned State Across A Reset
    [Tags]    full
    [Template]    Learned State Survives A Reset
    nucleo_l432kc           sysbus.usart2      3466

B-L475E-IOT01A Keeps Its Learned State Across A Reset
    [Tags]    full
    [Template]    Learned State Survives A Reset
    disco_l475vg_iot01a     sysbus.usart1      3467

NUCLEO-L4R5ZI Keeps Its Learned State Across A Reset
    [Tags]    full
    [Template]    Learned State Survives A Reset
    nucleo_l4r5zi           sysbus.lpuart1     3468

NUCLEO-L476RG Backbone Is Bit-Exact With TFLM
    [Tags]    full
    ${url}=    Start Board    nucleo_l476rg    sysbus.usart2    3469
    ${v}=    Tinyol Json    verify    --port    ${url}    --model    ${MODEL}    --n    20
    Should Be Equal As Integers    ${v}[samples]    20
    Should Be Equal As Integers    ${v}[mismatched_samples]    0

NUCLEO-L476RG Learns Like The Reference Learner
    [Tags]    full
    [Documentation]    `tinyol stream --train` on the device and `tinyol simulate` (numpy reference
    ...                learner, TFLM backbone) on the same stream: the same prequential accuracy.
    ${url}=    Start Board    nucleo_l476rg    sysbus.usart2    3470
    ${dev}=    Tinyol Json    stream    --port    ${url}    --data    digits:5-9@train    --no-progress
    ${ref}=    Tinyol Json    simulate    --model    ${MODEL}    --data    digits:5-9@train
    Should Be Equal As Integers    ${dev}[samples]    ${ref}[samples]
    Should Be Equal    ${dev}[accuracy]    ${ref}[prequential_accuracy]
