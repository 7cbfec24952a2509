// fixture.cc has C++ functions with known demangled names for elf_test.go.
namespace flint {

template <typename T> struct Box {
	T v;
	T spin(T n);
};

template <typename T> T Box<T>::spin(T n) {
	T s = v;
	for (T i = 0; i < n; i++)
		s += i;
	return s;
}

template struct Box<int>;

int plain(int x) { return x + 1; }

} // namespace flint

extern "C" int c_linkage(int x) { return flint::plain(x); }

int main() {
	flint::Box<int> b{1};
	return b.spin(3) + c_linkage(1) > 0 ? 0 : 1;
}
