/*  =========================================================================
    dsh-netem - a userspace stand-in for sch_netem, for the netns test bed

    Where the kernel has no sch_netem, a host of tests/netns/netbed.sh that
    must see delay or loss is built with its address on a TAP device instead
    of on its veth; this relay runs inside the host's namespace and moves
    Ethernet frames between the TAP device and the veth (an AF_PACKET
    socket), through one timed queue per direction. Each direction applies
    its own delay and random loss, and "cut" drops everything both ways, as
    a pulled cable would: no reset, no carrier change.

        dsh-netem TAP VETH CONTROL_FILE

    CONTROL_FILE holds "key value" lines, read at start and again on SIGHUP:
    delay_ms, loss_pct (both directions), out_delay_ms, out_loss_pct (frames
    the host sends), in_delay_ms, in_loss_pct (frames it receives), cut (0 or
    1), seed. SIGTERM or SIGINT ends the relay; on SIGUSR1 it prints its
    counters to stderr.

    Both sockets carry a virtio-net header (IFF_VNET_HDR, PACKET_VNET_HDR),
    so a frame whose checksum another host's kernel left to "hardware"
    crosses with that note instead of arriving with a wrong checksum. Memory
    is bounded: a direction holds at most QUEUE_BYTES_MAX bytes and
    QUEUE_FRAMES_MAX frames; beyond that frames are dropped, as a router's
    full queue would.
    =========================================================================
*/

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <linux/if_ether.h>
#include <linux/virtio_net.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FRAME_MAX           (65536 + 256)       //  a 64 KiB GSO frame, its Ethernet and virtio-net headers
#define QUEUE_FRAMES_MAX    4096
#define QUEUE_BYTES_MAX     (8 * 1024 * 1024)
#define DELAY_MS_MAX        60000
#define POLL_IDLE_MS        200

//  One direction's settings.
typedef struct {
    int delay_ms;
    double loss_pct;
} impairment_t;

//  A frame waiting for its time.
typedef struct {
    int64_t due_ms;
    size_t size;
    unsigned char *bytes;
} frame_t;

//  One direction: settings, the timed queue (a ring), counters.
typedef struct {
    const char *name;
    impairment_t impairment;
    frame_t ring [QUEUE_FRAMES_MAX];
    size_t head;
    size_t count;
    size_t bytes;
    uint64_t passed;
    uint64_t lost;
    uint64_t cut;
    uint64_t overflow;
} direction_t;

static volatile sig_atomic_t s_reload = 0;
static volatile sig_atomic_t s_report = 0;
static volatile sig_atomic_t s_stop = 0;
static uint64_t s_random_state = 88172645463325252ULL;

static void
s_on_signal (int signal_number)
{
    if (signal_number == SIGHUP)
        s_reload = 1;
    else
    if (signal_number == SIGUSR1)
        s_report = 1;
    else
        s_stop = 1;
}

static int64_t
s_now_ms (void)
{
    struct timespec now;
    clock_gettime (CLOCK_MONOTONIC, &now);
    return (int64_t) now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

//  xorshift64: the loss draw needs no quality beyond "uniform enough".
static double
s_uniform_pct (void)
{
    s_random_state ^= s_random_state << 13;
    s_random_state ^= s_random_state >> 7;
    s_random_state ^= s_random_state << 17;
    return (double) (s_random_state >> 11) / (double) (1ULL << 53) * 100.0;
}

static int
s_clamp_delay (long value)
{
    return value < 0? 0: value > DELAY_MS_MAX? DELAY_MS_MAX: (int) value;
}

static double
s_clamp_loss (double value)
{
    return value < 0? 0: value > 100? 100: value;
}

//  Reads the control file; a missing file or a bad line leaves the
//  settings it concerns as they were, and says so.
static void
s_load_control (const char *path, direction_t *out, direction_t *in, int *cut)
{
    FILE *file = fopen (path, "r");
    if (!file) {
        fprintf (stderr, "dsh-netem: cannot read %s: %s\n", path, strerror (errno));
        return;
    }
    char line [256];
    while (fgets (line, sizeof line, file)) {
        char key [64];
        double value;
        if (line [0] == '#' || line [0] == '\n')
            continue;
        if (sscanf (line, "%63s %lf", key, &value) != 2) {
            fprintf (stderr, "dsh-netem: %s: ignored line: %s", path, line);
            continue;
        }
        if (strcmp (key, "delay_ms") == 0)
            out->impairment.delay_ms = in->impairment.delay_ms = s_clamp_delay ((long) value);
        else
        if (strcmp (key, "loss_pct") == 0)
            out->impairment.loss_pct = in->impairment.loss_pct = s_clamp_loss (value);
        else
        if (strcmp (key, "out_delay_ms") == 0)
            out->impairment.delay_ms = s_clamp_delay ((long) value);
        else
        if (strcmp (key, "out_loss_pct") == 0)
            out->impairment.loss_pct = s_clamp_loss (value);
        else
        if (strcmp (key, "in_delay_ms") == 0)
            in->impairment.delay_ms = s_clamp_delay ((long) value);
        else
        if (strcmp (key, "in_loss_pct") == 0)
            in->impairment.loss_pct = s_clamp_loss (value);
        else
        if (strcmp (key, "cut") == 0)
            *cut = value != 0;
        else
        if (strcmp (key, "seed") == 0)
            s_random_state = (uint64_t) value | 1;
        else
            fprintf (stderr, "dsh-netem: %s: unknown key %s\n", path, key);
    }
    fclose (file);
}

//  Takes one frame into a direction: lost, cut, dropped on a full queue, or
//  queued for its due time.
static void
s_accept (direction_t *self, const unsigned char *bytes, size_t size, int cut)
{
    if (cut) {
        self->cut++;
        return;
    }
    if (self->impairment.loss_pct > 0 && s_uniform_pct () < self->impairment.loss_pct) {
        self->lost++;
        return;
    }
    if (self->count == QUEUE_FRAMES_MAX || self->bytes + size > QUEUE_BYTES_MAX) {
        self->overflow++;
        return;
    }
    unsigned char *copy = malloc (size);
    if (!copy) {
        self->overflow++;
        return;
    }
    memcpy (copy, bytes, size);
    frame_t *frame = &self->ring [(self->head + self->count) % QUEUE_FRAMES_MAX];
    frame->due_ms = s_now_ms () + self->impairment.delay_ms;
    frame->size = size;
    frame->bytes = copy;
    self->count++;
    self->bytes += size;
}

//  Sends every frame that is due; returns the milliseconds until the next
//  one, or -1 when the queue is empty.
static int
s_release (direction_t *self, int fd)
{
    while (self->count) {
        frame_t *frame = &self->ring [self->head];
        int64_t wait_ms = frame->due_ms - s_now_ms ();
        if (wait_ms > 0)
            return (int) wait_ms;
        //  A frame the other side refuses (down, full) is lost, as on a wire
        if (write (fd, frame->bytes, frame->size) == (ssize_t) frame->size)
            self->passed++;
        else
            self->overflow++;
        free (frame->bytes);
        self->bytes -= frame->size;
        self->head = (self->head + 1) % QUEUE_FRAMES_MAX;
        self->count--;
    }
    return -1;
}

//  Frees the frames still queued (at exit: they are never sent).
static void
s_discard (direction_t *self)
{
    while (self->count) {
        free (self->ring [self->head].bytes);
        self->head = (self->head + 1) % QUEUE_FRAMES_MAX;
        self->count--;
    }
    self->bytes = 0;
}

static void
s_print_counters (const direction_t *direction)
{
    fprintf (stderr, "dsh-netem: %s passed %llu lost %llu cut %llu overflow %llu queued %zu\n",
             direction->name, (unsigned long long) direction->passed, (unsigned long long) direction->lost,
             (unsigned long long) direction->cut, (unsigned long long) direction->overflow, direction->count);
}

static int
s_open_tap (const char *name)
{
    int fd = open ("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct ifreq request;
    memset (&request, 0, sizeof request);
    request.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    snprintf (request.ifr_name, IFNAMSIZ, "%s", name);
    if (ioctl (fd, TUNSETIFF, &request) < 0) {
        close (fd);
        return -1;
    }
    return fd;
}

static int
s_open_packet (const char *name)
{
    int index = (int) if_nametoindex (name);
    if (index == 0)
        return -1;
    int fd = socket (AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons (ETH_P_ALL));
    if (fd < 0)
        return -1;
    int on = 1;
    struct sockaddr_ll address = { .sll_family = AF_PACKET, .sll_protocol = htons (ETH_P_ALL),
                                   .sll_ifindex = index };
    struct packet_mreq promiscuous = { .mr_ifindex = index, .mr_type = PACKET_MR_PROMISC };
    //  Without PACKET_IGNORE_OUTGOING the relay would read back every frame
    //  it writes and loop it to the TAP device
    if (setsockopt (fd, SOL_PACKET, PACKET_VNET_HDR, &on, sizeof on) < 0
    ||  setsockopt (fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &on, sizeof on) < 0
    ||  setsockopt (fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &promiscuous, sizeof promiscuous) < 0
    ||  bind (fd, (struct sockaddr *) &address, sizeof address) < 0) {
        close (fd);
        return -1;
    }
    return fd;
}

//  Reads every frame waiting on fd into a direction.
static void
s_drain (int fd, direction_t *direction, int cut, unsigned char *buffer)
{
    for (;;) {
        ssize_t size = read (fd, buffer, FRAME_MAX);
        if (size <= 0)
            return;
        s_accept (direction, buffer, (size_t) size, cut);
    }
}

int
main (int argc, char *argv [])
{
    if (argc != 4) {
        fprintf (stderr, "usage: dsh-netem TAP VETH CONTROL_FILE\n");
        return 2;
    }
    const char *control = argv [3];
    int tap = s_open_tap (argv [1]);
    if (tap < 0) {
        fprintf (stderr, "dsh-netem: cannot attach to TAP device %s: %s\n", argv [1], strerror (errno));
        return 1;
    }
    int packet = s_open_packet (argv [2]);
    if (packet < 0) {
        fprintf (stderr, "dsh-netem: cannot open a packet socket on %s: %s\n", argv [2], strerror (errno));
        return 1;
    }
    static direction_t out = { .name = "out" };     //  the host's frames, TAP to veth
    static direction_t in = { .name = "in" };       //  frames for the host, veth to TAP
    int cut = 0;
    s_random_state ^= (uint64_t) s_now_ms () * 2654435761ULL + (uint64_t) getpid ();
    s_load_control (control, &out, &in, &cut);

    struct sigaction action;
    memset (&action, 0, sizeof action);
    action.sa_handler = s_on_signal;
    sigaction (SIGHUP, &action, NULL);
    sigaction (SIGUSR1, &action, NULL);
    sigaction (SIGTERM, &action, NULL);
    sigaction (SIGINT, &action, NULL);

    static unsigned char buffer [FRAME_MAX];
    while (!s_stop) {
        if (s_reload) {
            s_reload = 0;
            s_load_control (control, &out, &in, &cut);
        }
        if (s_report) {
            s_report = 0;
            s_print_counters (&out);
            s_print_counters (&in);
        }
        int out_wait = s_release (&out, packet);
        int in_wait = s_release (&in, tap);
        int timeout = POLL_IDLE_MS;
        if (out_wait >= 0 && out_wait < timeout)
            timeout = out_wait;
        if (in_wait >= 0 && in_wait < timeout)
            timeout = in_wait;
        struct pollfd items [2] = { { .fd = tap, .events = POLLIN }, { .fd = packet, .events = POLLIN } };
        if (poll (items, 2, timeout) < 0) {
            if (errno == EINTR)
                continue;
            fprintf (stderr, "dsh-netem: poll: %s\n", strerror (errno));
            return 1;
        }
        if (items [0].revents & POLLIN)
            s_drain (tap, &out, cut, buffer);
        if (items [1].revents & POLLIN)
            s_drain (packet, &in, cut, buffer);
    }
    s_print_counters (&out);
    s_print_counters (&in);
    s_discard (&out);
    s_discard (&in);
    close (packet);
    close (tap);
    return 0;
}
