*** Comments ***
Boots the tinyol firmware of every board in Renode and waits for its boot banner.

Run (Renode >= 1.15 installed, firmware built with `pio run` or `tinyol build`):
    renode-test tests/renode/tinyol.robot
renode-test starts Renode, imports its keywords (Execute Command, Create Terminal Tester,
Start Emulation, Wait For Line On Uart, ...) and resets the emulation before each test.

Without Renode the suite can only be dry-run; the keywords then come from a stub library:
    robot --dryrun --output NONE --report NONE --log NONE \
        --variable TOL_RENODE_KEYWORDS:tests/renode/dryrun/renode_keywords.resource \
        tests/renode/tinyol.robot
(tests/test_renode_static.py does exactly that.)


*** Settings ***
Documentation       tinyol firmware boots on each STM32L4 board modelled in mcu/renode/.
Resource            ${CURDIR}/tinyol.resource
Resource            ${TOL_RENODE_KEYWORDS}
Test Template       Firmware Boots And Prints Its Banner


*** Variables ***
# Where Renode's keywords come from: renode-test supplies them itself, so by default this
# re-imports tinyol.resource (a no-op); a dry run points it at the stub resource.
${TOL_RENODE_KEYWORDS}      ${CURDIR}/tinyol.resource


*** Test Cases ***    BOARD                   CONSOLE UART       PORT
NUCLEO-L476RG Boots   nucleo_l476rg           sysbus.usart2      3461
NUCLEO-L432KC Boots   nucleo_l432kc           sysbus.usart2      3462
B-L475E-IOT01A Boots  disco_l475vg_iot01a     sysbus.usart1      3463
NUCLEO-L4R5ZI Boots   nucleo_l4r5zi           sysbus.lpuart1     3464
