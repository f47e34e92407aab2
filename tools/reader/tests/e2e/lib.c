/* libe2e.so.  HOT is the name of the hot function of this version
 * (-DHOT=e2e_v1_hot ...); e2e_lib_hot calls it.  HOT is hidden, so that
 * call is direct: through the PLT, a sample could land on a stub that
 * belongs to no function of the version, and the e2e tests require every
 * library sample to be on a named function. */
#ifndef HOT
#define HOT e2e_lib_work
#endif
#define STR_(x) #x
#define STR(x) STR_(x)

/* Allocated bytes that differ per version: ld's --build-id=sha1 does not
 * hash .symtab, where the hidden HOT's name is. */
__attribute__((used)) static const char e2e_version[] = STR(HOT);

__attribute__((noinline, visibility("hidden"))) int HOT(int n)
{
	volatile int s = 0;
	for (int i = 0; i < n; i++)
		s += i ^ (s >> 2);
	return s;
}

int e2e_lib_hot(int n)
{
	return HOT(n);
}
