/*
 * Helpers for memory shared between processes of one host: whether a peer process is
 * still alive, which pid namespace we are in (pids only mean something within one), and
 * futex waits and wake-ups on a word in a shared mapping. Used by the shm transport and
 * the arena.
 */
#ifndef CHORUS_UTIL_PROC_H
#define CHORUS_UTIL_PROC_H

#include <stdatomic.h>
#include <stdint.h>

/* Nonzero if pid names a process that is gone (or a zombie). */
int chorus__pid_dead(uint32_t pid);

/* Inode of this process's pid namespace (0: unknown). */
uint64_t chorus__pidns(void);

/* Sleeps while *word == expected, at most timeout_ns. Not FUTEX_*_PRIVATE: the word may be
 * shared with other processes. Returns the syscall's result. */
int chorus__futex_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t timeout_ns);

/* Wakes up to nwaiters sleepers on word. */
void chorus__futex_wake(_Atomic uint32_t *word, int nwaiters);

#endif
