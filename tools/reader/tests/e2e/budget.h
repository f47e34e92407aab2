/* SPDX-License-Identifier: GPL-2.0 */
/* How long an e2e program's hot loop runs: until it has used a budget of
 * CPU time *and* done a floor of rounds of its loop.
 *
 * CPU time alone is not enough in a TCG guest on a busy host.  The guest's
 * clocks follow the host's wall time, so a vCPU thread the host has not
 * scheduled still charges CPU time to the guest task that was running, and
 * the sampling hrtimer that expired meanwhile fires once when the vCPU runs
 * again.  Such a task can use up its CPU milliseconds having done a small
 * part of its work, and get a handful of samples, none in its hot function
 * (session 30: 7 e2e tests failed so at load 9-10 on 2 CPUs).  Work is what
 * gets sampled: a round of the loop takes as long in the guest's clock
 * however busy the host is, so a floor of rounds is a floor of samples.
 *
 * Each loop's floor is about a third of the rounds it does in its CPU time
 * in a quiet TCG guest (E2E_BUDGET_VERBOSE=1 prints rounds and milliseconds
 * at the end of each budget): on a quiet machine the CPU time ends the loop,
 * as before; on a loaded one the floor does, later. */
#ifndef E2E_BUDGET_H
#define E2E_BUDGET_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct budget {
	const char *what;
	clockid_t clock;
	double start_ms, end_ms;
	long rounds, floor;
};

static inline double budget_now_ms(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A budget of MS milliseconds of CLOCK (a CPU-time clock) and at least
 * ROUNDS_PER_MS * MS rounds; WHAT names it for E2E_BUDGET_VERBOSE (NULL:
 * never printed). */
static inline void budget_start(struct budget *b, const char *what, clockid_t clock,
				double ms, double rounds_per_ms)
{
	b->what = what;
	b->clock = clock;
	b->start_ms = budget_now_ms(clock);
	b->end_ms = b->start_ms + ms;
	b->rounds = 0;
	b->floor = (long)(ms * rounds_per_ms);
}

/* True once both the time and the floor are used up. */
static inline int budget_spent(const struct budget *b)
{
	return b->rounds >= b->floor && budget_now_ms(b->clock) >= b->end_ms;
}

/* True, counting one round, while the budget is not spent. */
static inline int budget_more(struct budget *b)
{
	if (budget_spent(b)) {
		if (b->what && getenv("E2E_BUDGET_VERBOSE"))
			fprintf(stderr, "budget %s: %ld rounds (floor %ld) in %.1f ms\n", b->what,
				b->rounds, b->floor, budget_now_ms(b->clock) - b->start_ms);
		b->what = NULL;  /* said once */
		return 0;
	}
	b->rounds++;
	return 1;
}

#endif
