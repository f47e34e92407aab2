# mmap3: the front door.  Every generated file goes under build/.
#
#   make demo        the main job (see README)
#   make test        every test; ends with "N passed, N failed"
#
# The pieces live in mk/*.mk, one per area.

TOP      := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
BUILD    := $(TOP)/build
SHELL    := /bin/bash
NPROC    := $(shell nproc)

.DEFAULT_GOAL := help

include $(TOP)/mk/deps.mk
include $(TOP)/mk/kernel.mk
include $(TOP)/mk/vm.mk
include $(TOP)/mk/selftests.mk
include $(TOP)/mk/reader.mk
include $(TOP)/mk/perf.mk
include $(TOP)/mk/bench.mk
include $(TOP)/mk/top.mk
