// fixture.c has functions with known names for elf_test.go, which builds it
// at -O0 (nothing inlined) as a non-PIE executable, a PIE, a shared library,
// and stripped copies of those.
int exported_counter = 42;

static int static_helper(int x) { return x * 7 + exported_counter; }

int exported_work(int n) {
	int s = 0;
	for (int i = 0; i < n; i++)
		s += static_helper(i);
	return s;
}

int alias_target(int n) { return exported_work(n) + 1; }
int alias_weak(int n) __attribute__((weak, alias("alias_target")));

// Hand-written code: a function without .size and a bare NOTYPE label.
__asm__(".text\n"
	".globl asm_nosize\n"
	".type asm_nosize, @function\n"
	"asm_nosize:\n\tnop\n\tnop\n\tnop\n\tret\n"
	".globl asm_label\n"
	"asm_label:\n\tnop\n\tnop\n\tret\n");

int main(int argc, char **argv) {
	(void)argv;
	return exported_work(argc) + alias_weak(argc) > 0 ? 0 : 1;
}
