/* e2e test BPF program: a socket filter that runs hot in a bpf_loop()
 * callback (a subprogram) on every packet.  -DVARIANT=1 gives
 * e2e_bpf_a, -DVARIANT=2 e2e_bpf_b and -DVARIANT=3 e2e_bpf_c, each with
 * other instructions, so another tag. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#if VARIANT == 1
#define PROG e2e_bpf_a
#define STEP e2e_a_step
#define MUL 6364136223846793005ULL
#elif VARIANT == 2
#define PROG e2e_bpf_b
#define STEP e2e_b_step
#define MUL 2862933555777941757ULL
#else
#define PROG e2e_bpf_c
#define STEP e2e_c_step
#define MUL 3935559000370003845ULL
#endif

struct acc {
	__u64 v;
};

static long STEP(__u32 i, void *data)
{
	struct acc *a = data;

	a->v = a->v * MUL + i;
	return 0;
}

SEC("socket")
int PROG(struct __sk_buff *skb)
{
	struct acc a = { .v = skb->len };

	bpf_loop(2000, STEP, &a, 0);
	return skb->len + (a.v == 42);
}

char LICENSE[] SEC("license") = "GPL";
