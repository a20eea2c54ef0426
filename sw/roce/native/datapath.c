/* StarPulse host NIC data path in C: RoCEv2 frame build (PSN + ICRC) with sendmmsg, and receive (recvmmsg)
 * with INT-aware ICRC check.  The Python path (sw.roce.wire.template, sw.roce.wire.decode) is the reference;
 * tests/sw/roce/test_native_datapath.py proves the frames byte-identical. IPv4 frames without IP options. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <linux/if_packet.h>

#define ETH 14
#define IP4 20
#define UDP 8
#define BTH 12
#define DSCP_INT 0x17
#define MAX_BATCH 256
#define RX_FRAME_CAP 16384

static uint32_t crc_table[8][256];
static int crc_ready;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
    crc_ready = 1;
}

/* zlib.crc32(data, crc): the same CRC-32, slicing by 8. */
uint32_t sp_crc32(const uint8_t *p, size_t n, uint32_t crc) {
    if (!crc_ready) crc_init();
    crc = ~crc;
    while (n >= 8) {
        uint32_t a = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t b = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc_table[7][a & 0xFF] ^ crc_table[6][(a >> 8) & 0xFF] ^ crc_table[5][(a >> 16) & 0xFF] ^
              crc_table[4][a >> 24] ^ crc_table[3][b & 0xFF] ^ crc_table[2][(b >> 8) & 0xFF] ^
              crc_table[1][(b >> 16) & 0xFF] ^ crc_table[0][b >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

/* ICRC of an IPv4 RoCEv2 packet: masked IP/UDP/BTH (lengths as given), then the bytes after the BTH. */
static uint32_t icrc_v4(const uint8_t *ip, uint16_t ip_len, uint16_t udp_len, const uint8_t *bth,
                        const uint8_t *rest, size_t rest_len) {
    uint8_t m[8 + IP4 + UDP + BTH];
    memset(m, 0xFF, 8);
    memcpy(m + 8, ip, IP4);
    m[8 + 1] = 0xFF;                        /* TOS */
    m[8 + 2] = ip_len >> 8; m[8 + 3] = ip_len & 0xFF;
    m[8 + 8] = 0xFF;                        /* TTL */
    m[8 + 10] = m[8 + 11] = 0xFF;           /* header checksum */
    memcpy(m + 8 + IP4, ip + IP4, 4);       /* ports */
    m[8 + IP4 + 4] = udp_len >> 8; m[8 + IP4 + 5] = udp_len & 0xFF;
    m[8 + IP4 + 6] = m[8 + IP4 + 7] = 0xFF; /* UDP checksum */
    memcpy(m + 8 + IP4 + UDP, bth, BTH);
    m[8 + IP4 + UDP + 4] = 0xFF;            /* BTH resv8a */
    return sp_crc32(rest, rest_len, sp_crc32(m, sizeof m, 0));
}

/* Frames i = 0..count-1 of one flow into out (count * len bytes): the template frame with PSN psn0 + i
 * (mod 2^24, ack-request bit kept) and its ICRC.  Returns 0, or -1 when the template is not IPv4 RoCEv2. */
int sp_build(const uint8_t *tmpl, size_t len, uint32_t psn0, int count, uint8_t *out) {
    if (len < ETH + IP4 + UDP + BTH + 4 || tmpl[12] != 0x08 || tmpl[13] != 0 || tmpl[ETH] != 0x45) return -1;
    uint16_t ip_len = (uint16_t)(tmpl[ETH + 2] << 8 | tmpl[ETH + 3]);
    uint16_t udp_len = (uint16_t)(tmpl[ETH + IP4 + 4] << 8 | tmpl[ETH + IP4 + 5]);
    const size_t bth = ETH + IP4 + UDP, rest = bth + BTH;
    for (int i = 0; i < count; i++) {
        uint8_t *f = out + (size_t)i * len;
        memcpy(f, tmpl, len);
        uint32_t psn = (psn0 + (uint32_t)i) & 0xFFFFFF;
        f[bth + 9] = psn >> 16; f[bth + 10] = (psn >> 8) & 0xFF; f[bth + 11] = psn & 0xFF;
        uint32_t crc = icrc_v4(f + ETH, ip_len, udp_len, f + bth, f + rest, len - rest - 4);
        f[len - 4] = crc & 0xFF; f[len - 3] = (crc >> 8) & 0xFF; f[len - 2] = (crc >> 16) & 0xFF; f[len - 1] = crc >> 24;
    }
    return 0;
}

/* n message headers over consecutive slots of stride bytes in buf, each one iovec of len bytes. */
static void slot_msgs(struct mmsghdr *msgs, struct iovec *iov, int n, uint8_t *buf, size_t stride, size_t len) {
    memset(msgs, 0, sizeof(struct mmsghdr) * (size_t)n);
    for (int i = 0; i < n; i++) {
        iov[i].iov_base = buf + (size_t)i * stride;
        iov[i].iov_len = len;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
}

/* Build count (<= MAX_BATCH) frames as sp_build does and send them on AF_PACKET socket fd with sendmmsg.
 * Returns frames sent (the kernel may take fewer when its queue is full), or -errno. */
int sp_tx_burst(int fd, const uint8_t *tmpl, size_t len, uint32_t psn0, int count, uint8_t *scratch) {
    struct mmsghdr msgs[MAX_BATCH];
    struct iovec iov[MAX_BATCH];
    if (count > MAX_BATCH) count = MAX_BATCH;
    if (sp_build(tmpl, len, psn0, count, scratch) < 0) return -EINVAL;
    slot_msgs(msgs, iov, count, scratch, len, len);
    int sent = 0;
    while (sent < count) {
        int r = sendmmsg(fd, msgs + sent, (unsigned)(count - sent), MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR) continue;
            return sent ? sent : -errno;
        }
        sent += r;
    }
    return sent;
}

/* Verdict on one received frame: 1 RoCEv2 with a good ICRC (INT stack, if any, skipped), 0 RoCEv2 with a bad
 * ICRC, -1 not an IPv4 RoCEv2 frame this path checks (the caller counts it as such). */
int sp_rx_check(const uint8_t *f, size_t n) {
    if (n < ETH + IP4 + UDP || f[12] != 0x08 || f[13] != 0 || f[ETH] != 0x45 || f[ETH + 9] != 17) return -1;
    const uint8_t *ip = f + ETH, *udp = ip + IP4;
    if ((udp[2] << 8 | udp[3]) != 4791) return -1;
    uint16_t ip_len = (uint16_t)(ip[2] << 8 | ip[3]), udp_len = (uint16_t)(udp[4] << 8 | udp[5]);
    if (ip_len > n - ETH) return -1;
    size_t bth = ETH + IP4 + UDP, int_bytes = 0;
    if ((ip[1] >> 2) == DSCP_INT) {
        if (n < bth + 16) return -1;
        int_bytes = (size_t)f[bth + 1] * 4;
        if (int_bytes < 16 || udp_len < UDP + int_bytes + BTH + 4) return -1;
    }
    size_t end = ETH + (size_t)ip_len, b = bth + int_bytes;
    if (end < b + BTH + 4) return -1;
    uint32_t crc = icrc_v4(ip, (uint16_t)(ip_len - int_bytes), (uint16_t)(udp_len - int_bytes), f + b, f + b + BTH,
                           end - b - BTH - 4);
    uint32_t wire = (uint32_t)f[end - 4] | (uint32_t)f[end - 3] << 8 | (uint32_t)f[end - 2] << 16 |
                    (uint32_t)f[end - 1] << 24;
    return crc == wire;
}

/* Receive up to max (<= MAX_BATCH) frames from fd (non-blocking recvmmsg into buf, max * RX_FRAME_CAP bytes)
 * and add to counts[]: 0 frames for this host, 1 their bytes, 2 good RoCEv2, 3 bad ICRC, 4 other, 5 not for
 * this host (outgoing/others).  Returns frames read, or -errno (EAGAIN: none waiting). */
int sp_rx_burst(int fd, uint8_t *buf, int max, uint64_t *counts) {
    struct mmsghdr msgs[MAX_BATCH];
    struct iovec iov[MAX_BATCH];
    struct sockaddr_ll addrs[MAX_BATCH];
    if (max > MAX_BATCH) max = MAX_BATCH;
    slot_msgs(msgs, iov, max, buf, RX_FRAME_CAP, RX_FRAME_CAP);
    for (int i = 0; i < max; i++) {
        msgs[i].msg_hdr.msg_name = &addrs[i];
        msgs[i].msg_hdr.msg_namelen = sizeof addrs[i];
    }
    int r = recvmmsg(fd, msgs, (unsigned)max, MSG_DONTWAIT, NULL);
    if (r < 0) return -errno;
    for (int i = 0; i < r; i++) {
        size_t n = msgs[i].msg_len;
        if (addrs[i].sll_pkttype != PACKET_HOST) { counts[5]++; continue; }
        counts[0]++;
        counts[1] += n;
        int v = sp_rx_check(buf + (size_t)i * RX_FRAME_CAP, n);
        counts[v == 1 ? 2 : v == 0 ? 3 : 4]++;
    }
    return r;
}
