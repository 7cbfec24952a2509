// tiny.c is the source of the smallest ELF fixtures, used as fuzz seeds and
// build ID tests. Regenerate them with:
//
//	gcc -Os -nostdlib -static -fno-asynchronous-unwind-tables \
//	    -Wl,--build-id=0x0123456789abcdef -Wl,-n -o tiny-amd64.elf tiny.c
//	gcc -m32 -Os -nostdlib -static -fno-asynchronous-unwind-tables -fno-pic \
//	    -Wl,--build-id=0xfeedface -Wl,-n -o tiny-386.elf tiny.c
//	gcc -Os -nostdlib -shared -fPIC -fno-asynchronous-unwind-tables \
//	    -Wl,--build-id=0x0123456789abcdef -Wl,-z,noseparate-code \
//	    -Wl,-z,max-page-size=16 -o tiny-amd64.so tiny.c
//	gcc -Os -nostdlib -shared -fPIC \
//	    -Wl,--build-id=0x0123456789abcdef -Wl,-z,noseparate-code \
//	    -Wl,-z,max-page-size=16 -Wl,--eh-frame-hdr -o tiny-unwind-amd64.so tiny.c
//
// (the last with unwind tables, .eh_frame and its .eh_frame_hdr index)
//
// tiny-gonote-amd64.elf swaps the GNU build ID for a Go one, the note
// "Go\0\0" type 4 "flint-go-build-id/fixture" written to gonote.bin:
//
//	objcopy --remove-section .note.gnu.build-id \
//	    --add-section .note.go.buildid=gonote.bin \
//	    --set-section-flags .note.go.buildid=alloc,readonly \
//	    tiny-amd64.elf tiny-gonote-amd64.elf
static int helper(int x) { return x * 3 + 1; }

int work(int n) {
	int s = 0;
	for (int i = 0; i < n; i++)
		s += helper(i);
	return s;
}

void _start(void) {
	work(10);
	__asm__ volatile("mov $60, %eax; xor %edi, %edi; syscall");
}
