"""What is computed per step: tensor statistics on the device, the fused CPU norm kernel, batch
checksums, the device-to-host transfer and the rows built from them."""
