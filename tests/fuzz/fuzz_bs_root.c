/*
 * The bootstrap root's admission of the ranks' hellos (chorus__bs_root_admit,
 * lib/bootstrap/root.c), fed a sequence of hellos the way root_gather feeds it: each is
 * unpacked (chorus__bs_hello_unpack) and, when admitted, filed in fds[rank]. Input: u64 the
 * root's communicator id, then records of 1 control byte + CHORUS_BS_HELLO_BYTES bytes.
 * Control bit 0: the harness writes the right purpose and communicator id into the hello
 * (so that the fuzzer reaches the rank checks at once); bit 1: nranks becomes 1 + its low
 * 4 bits and rank its low 5 bits (small tables, ranks just out of range too).
 *
 * Invariants, from an independent model of the rules: a hello is admitted exactly when it
 * is for the root's purpose and communicator, 1 <= nranks <= CHORUS_BS_MAX_RANKS (2^20),
 * rank < nranks, it carries an address, its nranks is the one of the hellos admitted
 * before and its rank has not arrived yet; the tables are sized by the first admitted
 * hello and never by a refused one; the table holds "TABL", nranks and each admitted
 * rank's address as packed.
 *
 * corpus/bs_root/seed-no-addr-first: a first hello without an address used to size the
 * tables (fixing nranks) before it was refused, so that the ranks that then came with
 * another rank count were refused and the job waited for its deadline. The address is now
 * checked before anything is allocated.
 */
#include "fuzz_common.h"

#include "bootstrap/bootstrap.h"
#include "bootstrap/bs_internal.h"

#include <string.h>

#define MAX_RECORDS 64

static void patch32(uint8_t *p, uint32_t v)
{
    chorus__bs_put32(p, v);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    chorus_bs_root_tab_t tab;
    uint32_t admitted[MAX_RECORDS];
    int nadmitted = 0;
    uint32_t model_nranks = 0;

    if (size < 8) return 0;
    memset(&tab, 0, sizeof(tab));
    tab.comm_id = chorus__bs_get64(data);
    tab.name = "fuzz root";
    data += 8;
    size -= 8;
    for (int rec = 0; rec < MAX_RECORDS && size >= 1 + CHORUS_BS_HELLO_BYTES; rec++) {
        uint8_t buf[CHORUS_BS_HELLO_BYTES];
        chorus_bs_hello_t h;
        uint8_t ctl = data[0];

        memcpy(buf, data + 1, sizeof buf);
        data += 1 + sizeof buf;
        size -= 1 + sizeof buf;
        if (ctl & 1) {
            patch32(buf, CHORUS_BS_PURPOSE_ROOT);
            chorus__bs_put64(buf + 4, tab.comm_id);
        }
        if (ctl & 2) {
            patch32(buf + 12, chorus__bs_get32(buf + 12) & 31);
            patch32(buf + 16, 1 + (chorus__bs_get32(buf + 16) & 15));
        }
        if (chorus__bs_hello_unpack(buf, sizeof buf, &h) != CHORUS_SUCCESS) continue;

        int expect = h.purpose == CHORUS_BS_PURPOSE_ROOT && h.comm_id == tab.comm_id &&
                     h.nranks >= 1 && h.nranks <= (uint32_t)1 << 20 && h.rank < h.nranks &&
                     (h.addr.ss_family == AF_INET || h.addr.ss_family == AF_INET6) &&
                     (model_nranks == 0 || h.nranks == model_nranks);
        for (int i = 0; expect && i < nadmitted; i++)
            expect = admitted[i] != h.rank;

        int got = chorus__bs_root_admit(&tab, &h);
        FUZZ_CHECK(got == expect);
        if (!got) {
            /* A refused hello never sizes the tables. */
            FUZZ_CHECK((uint32_t)tab.nranks == model_nranks);
            FUZZ_CHECK((tab.fds == NULL) == (model_nranks == 0));
            continue;
        }
        model_nranks = h.nranks;
        FUZZ_CHECK(tab.nranks == (int)h.nranks && tab.fds != NULL && tab.table != NULL);
        FUZZ_CHECK(tab.fds[h.rank] == -1);
        tab.fds[h.rank] = 1000 + nadmitted; /* a stand-in: never closed */
        tab.arrived++;
        admitted[nadmitted++] = h.rank;

        uint8_t packed[CHORUS_BS_ADDR_BYTES];
        chorus__bs_pack_addr(&h.addr, packed);
        FUZZ_CHECK(memcmp(tab.table, "TABL", 4) == 0);
        FUZZ_CHECK(chorus__bs_get32(tab.table + 4) == h.nranks);
        FUZZ_CHECK(memcmp(tab.table + 8 + (size_t)CHORUS_BS_ADDR_BYTES * h.rank, packed,
                          sizeof packed) == 0);
        /* The wire form of the hello's address is what the table holds. */
        FUZZ_CHECK(memcmp(packed, buf + 20, sizeof packed) == 0);
    }
    FUZZ_CHECK(tab.nranks >= 0 && tab.nranks <= CHORUS_BS_MAX_RANKS);
    FUZZ_CHECK(tab.arrived == nadmitted && tab.arrived <= tab.nranks);
    free(tab.fds);
    free(tab.table);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    unsetenv("CHORUS_DEBUG");
    return 0;
}
