/* libe2e.so.  HOT is the name of the hot function of this version
 * (-DHOT=e2e_v1_hot ...); e2e_lib_hot calls it. */
#ifndef HOT
#define HOT e2e_lib_work
#endif

__attribute__((noinline)) int HOT(int n)
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
