package image

// BootSectorDisk returns a whole-disk image of size bytes whose MBR boot
// code writes msg to COM1 (I/O port 0x3f8) and halts. It is the smallest
// image that proves a deploy end to end: if the firmware boots the disk,
// msg appears on the serial console. msg must fit in the boot sector.
func BootSectorDisk(msg string, size int) []byte {
	// cli; xor ax,ax; mov ds,ax; mov si,0x7c16; mov dx,0x3f8
	// loop: lodsb; test al,al; jz done; out dx,al; jmp loop
	// done: hlt; jmp done
	code := []byte{0xFA, 0x31, 0xC0, 0x8E, 0xD8, 0xBE, 0x16, 0x7C, 0xBA, 0xF8, 0x03,
		0xAC, 0x84, 0xC0, 0x74, 0x03, 0xEE, 0xEB, 0xF8, 0xF4, 0xEB, 0xFD}
	if size < 512 {
		size = 512
	}
	img := make([]byte, size)
	copy(img, code)
	copy(img[len(code):min(len(code)+len(msg)+3, 510)], msg+"\r\n\x00") // msg at 0x7c00+22
	img[510], img[511] = 0x55, 0xAA
	return img
}
