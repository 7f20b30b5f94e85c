/*
 * ina-lldp-listen: the first LLDP frame on each named interface, as IPA's capture takes it. Node has no raw
 * sockets, and tcpdump with its libraries would add about 4 MB to the ramdisk; this is one AF_PACKET socket per
 * interface for ethertype 0x88cc, in promiscuous mode while it is open (a packet-socket membership, which the
 * kernel drops when the socket closes, so the NIC's flag is never left set), and one poll() loop.
 *
 *   ina-lldp-listen TIMEOUT_MS IFACE...
 *
 * One line per interface, in argument order, once all have a frame or the window closed:
 *   IFACE frame HEX      the whole first frame (Ethernet header included) in lower-case hex
 *   IFACE none           no frame within the window
 *   IFACE error TEXT     the interface could not be listened to
 * Exit 0 when every line was written, 2 on bad arguments.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LLDP_ETHERTYPE 0x88cc
#define MAX_IFACES 256
#define FRAME_MAX 1600

struct listener {
  const char *name;
  int fd;
  const char *error;
  char error_text[160];
  unsigned char frame[FRAME_MAX];
  ssize_t length; /* -1: none yet */
};

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void fail(struct listener *l, const char *what) {
  snprintf(l->error_text, sizeof l->error_text, "%s: %s", what, strerror(errno));
  l->error = l->error_text;
  if (l->fd >= 0) close(l->fd);
  l->fd = -1;
}

static void open_listener(struct listener *l) {
  l->fd = -1;
  l->length = -1;
  l->error = NULL;
  unsigned int index = if_nametoindex(l->name);
  if (index == 0) {
    fail(l, "no such interface");
    return;
  }
  l->fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(LLDP_ETHERTYPE));
  if (l->fd < 0) {
    fail(l, "socket");
    return;
  }
  struct sockaddr_ll addr = {0};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(LLDP_ETHERTYPE);
  addr.sll_ifindex = (int)index;
  if (bind(l->fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
    fail(l, "bind");
    return;
  }
  struct packet_mreq mreq = {0};
  mreq.mr_ifindex = (int)index;
  mreq.mr_type = PACKET_MR_PROMISC;
  if (setsockopt(l->fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq, sizeof mreq) < 0) fail(l, "promiscuous mode");
}

int main(int argc, char **argv) {
  if (argc < 3 || argc - 2 > MAX_IFACES) {
    fprintf(stderr, "usage: ina-lldp-listen TIMEOUT_MS IFACE... (at most %d)\n", MAX_IFACES);
    return 2;
  }
  char *end;
  long long timeout = strtoll(argv[1], &end, 10);
  if (*end != '\0' || timeout < 0) {
    fprintf(stderr, "ina-lldp-listen: bad TIMEOUT_MS %s\n", argv[1]);
    return 2;
  }
  int count = argc - 2;
  static struct listener ls[MAX_IFACES];
  struct pollfd fds[MAX_IFACES];
  for (int i = 0; i < count; i++) {
    ls[i].name = argv[i + 2];
    open_listener(&ls[i]);
  }
  long long deadline = now_ms() + timeout;
  for (;;) {
    int waiting = 0;
    for (int i = 0; i < count; i++) {
      fds[i].fd = ls[i].fd >= 0 && ls[i].length < 0 ? ls[i].fd : -1;
      fds[i].events = POLLIN;
      fds[i].revents = 0;
      if (fds[i].fd >= 0) waiting++;
    }
    long long left = deadline - now_ms();
    if (waiting == 0 || left <= 0) break;
    int n = poll(fds, (nfds_t)count, left > 60000 ? 60000 : (int)left);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < count && n > 0; i++) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      struct sockaddr_ll from;
      socklen_t fromlen = sizeof from;
      ssize_t got = recvfrom(ls[i].fd, ls[i].frame, FRAME_MAX, 0, (struct sockaddr *)&from, &fromlen);
      if (got < 0) {
        if (errno != EAGAIN && errno != EINTR) fail(&ls[i], "recv");
        continue;
      }
      /* Frames this host sends itself come back on the socket too; only a neighbour's count. */
      if (from.sll_pkttype == PACKET_OUTGOING) continue;
      ls[i].length = got;
    }
  }
  for (int i = 0; i < count; i++) {
    if (ls[i].error) {
      printf("%s error %s\n", ls[i].name, ls[i].error);
    } else if (ls[i].length < 0) {
      printf("%s none\n", ls[i].name);
    } else {
      printf("%s frame ", ls[i].name);
      for (ssize_t b = 0; b < ls[i].length; b++) printf("%02x", ls[i].frame[b]);
      printf("\n");
    }
    if (ls[i].fd >= 0) close(ls[i].fd);
  }
  return fflush(stdout) == 0 ? 0 : 1;
}
