// SPDX-License-Identifier: GPL-2.0
/*
 * A module for the mmap3 selftests: code of a module whose load and unload
 * perf reports.  Writing a number N to /proc/mmap3_testmod runs a loop of N
 * steps in the module's own text, so that samples land there; init_steps=N
 * runs it in init, before the module is live.
 */
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/proc_fs.h>
#include <linux/uaccess.h>

static noinline u64 mmap3_testmod_spin(unsigned long n)
{
	u64 acc = n;

	while (n--) {
		acc = acc * 6364136223846793005ULL + n;
		barrier();
	}
	return acc;
}

static ssize_t mmap3_testmod_write(struct file *file, const char __user *buf,
				   size_t len, loff_t *off)
{
	unsigned long n;
	int err;

	err = kstrtoul_from_user(buf, len, 10, &n);
	if (err)
		return err;
	if (n > 100000000)
		return -EINVAL;
	if (mmap3_testmod_spin(n) == 42)
		pr_debug("mmap3_testmod: 42\n");
	return len;
}

static const struct proc_ops mmap3_testmod_ops = {
	.proc_write = mmap3_testmod_write,
};

/* A slow init: the module is loaded, and not yet live, for that long */
static unsigned long init_steps;
module_param(init_steps, ulong, 0444);
MODULE_PARM_DESC(init_steps, "Steps of the loop to run in init (at most 10^9)");

static int __init mmap3_testmod_init(void)
{
	if (init_steps > 1000000000)
		return -EINVAL;
	if (init_steps && mmap3_testmod_spin(init_steps) == 42)
		pr_debug("mmap3_testmod: 42\n");
	if (!proc_create("mmap3_testmod", 0200, NULL, &mmap3_testmod_ops))
		return -ENOMEM;
	return 0;
}

static void __exit mmap3_testmod_exit(void)
{
	remove_proc_entry("mmap3_testmod", NULL);
}

module_init(mmap3_testmod_init);
module_exit(mmap3_testmod_exit);
MODULE_DESCRIPTION("Code for the PERF_RECORD_MMAP3 module selftest");
MODULE_LICENSE("GPL");
