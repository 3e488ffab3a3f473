// tinyol: an I2C front end for a register-file sensor model that Renode offers on SPI only.
//
// Why: the B-L475E-IOT01A's IMU (LSM6DSL) is on I2C2, and Renode 1.15.3 ships the register-
// compatible LSM6DSO_IMU (RESD-fed) as an SPI peripheral only: placing it on an I2C controller
// fails with "E05: Register 'i2c2' ... does not provide an interface to register 'imu'".
// Newer Renode adds the I2C interface to the model itself; with such a Renode this bridge is
// not needed (place the model on i2c2 directly).
//
// What it does: it sits on the I2C bus at the sensor's address and holds the sensor model as
// its one child. An I2C write [reg, d0, d1, ...] becomes the SPI frame the ST sensors use
// (first byte reg with bit 7 clear = write, then the data); an I2C read of n bytes after a
// write [reg] becomes the frame (reg | 0x80) followed by n dummy bytes, whose answers are the
// register values. Register auto-increment (IF_INC) stays the model's business, as on the
// chip. Renode compiles this file at run time (`include @TinyolI2CRegisterBridge.cs` in the
// board script, before the platform description that uses it).
using System.Collections.Generic;
using Antmicro.Renode.Core;
using Antmicro.Renode.Core.Structure;
using Antmicro.Renode.Peripherals.I2C;
using Antmicro.Renode.Peripherals.SPI;

namespace Antmicro.Renode.Peripherals.Sensors
{
    public class TinyolI2CRegisterBridge : NullRegistrationPointPeripheralContainer<ISPIPeripheral>, II2CPeripheral
    {
        public TinyolI2CRegisterBridge(IMachine machine) : base(machine)
        {
        }

        public void Write(byte[] data)
        {
            if(data.Length == 0 || RegisteredPeripheral == null)
            {
                return;
            }
            EndFrame();
            register = (byte)(data[0] & 0x7F);
            if(data.Length == 1)
            {
                return; // the register address of a read that follows
            }
            RegisteredPeripheral.Transmit(register);
            for(var i = 1; i < data.Length; i++)
            {
                RegisteredPeripheral.Transmit(data[i]);
            }
            frameOpen = true;
        }

        public byte[] Read(int count = 1)
        {
            var result = new byte[count];
            if(RegisteredPeripheral == null)
            {
                return result;
            }
            EndFrame();
            RegisteredPeripheral.Transmit((byte)(register | 0x80));
            for(var i = 0; i < count; i++)
            {
                result[i] = RegisteredPeripheral.Transmit(0);
            }
            frameOpen = true;
            return result;
        }

        public void FinishTransmission()
        {
            EndFrame();
        }

        public override void Reset()
        {
            EndFrame();
            register = 0;
        }

        private void EndFrame()
        {
            if(frameOpen && RegisteredPeripheral != null)
            {
                RegisteredPeripheral.FinishTransmission();
            }
            frameOpen = false;
        }

        private byte register;
        private bool frameOpen;
    }
}
