/*
 * Linked into every fuzz target with -Wl,--wrap=getaddrinfo: the library's resolver calls
 * reach this instead, which only ever converts numeric addresses and "localhost". A fuzzer
 * feeding host names to chorus__sock_parse_addr must not send DNS queries off the machine.
 */
#include <netdb.h>
#include <string.h>

int __real_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                       struct addrinfo **res);
int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                       struct addrinfo **res);

int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                       struct addrinfo **res)
{
    struct addrinfo h;

    memset(&h, 0, sizeof(h));
    if (hints != NULL) h = *hints;
    h.ai_flags |= AI_NUMERICHOST;
    if (node != NULL && strcmp(node, "localhost") == 0) node = "127.0.0.1";
    return __real_getaddrinfo(node, service, &h, res);
}
