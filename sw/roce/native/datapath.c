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
#include <time.h>
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

/* --- the SoftNic's port (sw.roce.softnic.native_port): frames the RC logic built, sent in one sendmmsg, and
 * frames received in one recvmmsg with their kernel stamps and a verdict that lets Python skip its checks. --- */

/* Send count frames laid end to end in buf (lens[i] bytes each) on fd with sendmmsg.  A frame the kernel
 * refuses is skipped (a NIC TX drop, as RawSocketPort.send counts it) and the rest still go.  Returns frames
 * sent; the caller counts count - sent as errors. */
int sp_send_frames(int fd, const uint8_t *buf, const uint32_t *lens, int count) {
    struct mmsghdr msgs[MAX_BATCH];
    struct iovec iov[MAX_BATCH];
    int sent = 0, done = 0;
    while (done < count) {
        int n = count - done > MAX_BATCH ? MAX_BATCH : count - done;
        memset(msgs, 0, sizeof(struct mmsghdr) * (size_t)n);
        for (int i = 0; i < n; i++) {
            iov[i].iov_base = (void *)buf;
            iov[i].iov_len = lens[done + i];
            buf += lens[done + i];
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        int at = 0;
        while (at < n) {
            int r = sendmmsg(fd, msgs + at, (unsigned)(n - at), MSG_DONTWAIT);
            if (r < 0) {
                if (errno == EINTR) continue;
                at++;                         /* this frame is dropped; try the next */
                continue;
            }
            at += r;
            sent += r;
        }
        done += n;
    }
    return sent;
}

/* Turn on SO_TIMESTAMPNS (the kernel's receive time as a control message of every frame); 0 or -errno. */
int sp_enable_rx_stamps(int fd) {
    int on = 1;
    return setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) ? -errno : 0;
}

/* 1 when decode() may skip its checks on this frame: untagged IPv4 without options or INT, not a fragment, UDP to
 * 4791, lengths consistent, IPv4 header checksum and ICRC good.  0 otherwise: Python decodes and checks it in
 * full (IPv6, VLAN, INT, anything bad keep the reference path's verdicts and errors). */
int sp_nic_verdict(const uint8_t *f, size_t n) {
    if (n < ETH + IP4 + UDP + BTH + 4 || f[12] != 0x08 || f[13] != 0 || f[ETH] != 0x45 || f[ETH + 9] != 17) return 0;
    const uint8_t *ip = f + ETH, *udp = ip + IP4;
    if (((ip[6] << 8 | ip[7]) & 0x3FFF) || (ip[1] >> 2) == DSCP_INT || (udp[2] << 8 | udp[3]) != 4791) return 0;
    size_t ip_len = (size_t)(ip[2] << 8 | ip[3]), udp_len = (size_t)(udp[4] << 8 | udp[5]);
    if (ip_len > n - ETH || udp_len != ip_len - IP4 || ip_len < IP4 + UDP + BTH + 4) return 0;
    uint32_t sum = 0;
    for (int i = 0; i < IP4; i += 2) sum += (uint32_t)(ip[i] << 8 | ip[i + 1]);
    if (sum % 0xFFFF) return 0;
    size_t end = ETH + ip_len, b = ETH + IP4 + UDP;
    uint32_t crc = icrc_v4(ip, (uint16_t)ip_len, (uint16_t)udp_len, f + b, f + b + BTH, end - b - BTH - 4);
    uint32_t wire = (uint32_t)f[end - 4] | (uint32_t)f[end - 3] << 8 | (uint32_t)f[end - 2] << 16 |
                    (uint32_t)f[end - 1] << 24;
    return crc == wire;
}

#define STAMP_SPACE 64
/* Receive up to max (<= MAX_BATCH) frames from fd (non-blocking recvmmsg into buf, RX_FRAME_CAP bytes a slot):
 * lens[i] (bytes), types[i] (sll_pkttype) and verdicts[i] (sp_nic_verdict of host frames; 2: longer than a slot,
 * cut to RX_FRAME_CAP bytes); stamps[0]/[1] the kernel's receive time (CLOCK_REALTIME ns,
 * SO_TIMESTAMPNS) of the first and last frame read, 0 when it gave none.  Returns frames read, or -errno. */
int sp_rx_frames(int fd, uint8_t *buf, int max, uint32_t *lens, uint8_t *types, uint8_t *verdicts,
                 int64_t *stamps) {
    struct mmsghdr msgs[MAX_BATCH];
    struct iovec iov[MAX_BATCH];
    struct sockaddr_ll addrs[MAX_BATCH];
    uint8_t control[MAX_BATCH][STAMP_SPACE] __attribute__((aligned(8)));
    if (max > MAX_BATCH) max = MAX_BATCH;
    slot_msgs(msgs, iov, max, buf, RX_FRAME_CAP, RX_FRAME_CAP);
    for (int i = 0; i < max; i++) {
        msgs[i].msg_hdr.msg_name = &addrs[i];
        msgs[i].msg_hdr.msg_namelen = sizeof addrs[i];
        msgs[i].msg_hdr.msg_control = control[i];
        msgs[i].msg_hdr.msg_controllen = STAMP_SPACE;
    }
    int r;
    do r = recvmmsg(fd, msgs, (unsigned)max, MSG_DONTWAIT, NULL); while (r < 0 && errno == EINTR);
    if (r < 0) return -errno;
    stamps[0] = stamps[1] = 0;
    for (int i = 0; i < r; i++) {
        size_t n = msgs[i].msg_len;
        int trunc = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0;
        if (n > RX_FRAME_CAP) n = RX_FRAME_CAP;
        lens[i] = (uint32_t)n;
        types[i] = addrs[i].sll_pkttype;
        verdicts[i] = !trunc && types[i] == PACKET_HOST ? (uint8_t)sp_nic_verdict(buf + (size_t)i * RX_FRAME_CAP, n)
                                                        : 0;
        if (trunc) verdicts[i] = 2;
        if (i == 0 || i == r - 1) {
            int64_t ts = 0;
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&msgs[i].msg_hdr); c; c = CMSG_NXTHDR(&msgs[i].msg_hdr, c)) {
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                    struct timespec t;
                    memcpy(&t, CMSG_DATA(c), sizeof t);
                    ts = (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
                }
            }
            stamps[i == 0 ? 0 : 1] = ts;
            if (r == 1) stamps[1] = ts;
        }
    }
    return r;
}
