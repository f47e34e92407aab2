// SPDX-License-Identifier: GPL-2.0
/* A shared object for the dlopen selftest */
int mmap3_dso_function(int x)
{
	return x * 3 + 1;
}
