/* pin.c - pinned memory: ranges a caller sends from again and again (transport.h, "Pinned
 * memory"), for a backend that can send from them where they lie.
 *
 * A small table under a mutex: a process pins a few buffers (the SDK one per tensor), and a
 * backend looks one up once per large send, which costs far less than the bytes it then moves
 * without a copy. Ids never repeat, so memory unpinned and freed, then allocated again at the
 * same address and pinned, is a new range: a backend's registration of the old one (keyed by
 * id) is never used for it. */
#include "transport/internal.h"

#include <pthread.h>
#include <stdatomic.h>

#define PIN_MAX 256

static pthread_mutex_t pin_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ts__pin pins[PIN_MAX];
static size_t npins;
static uint64_t pin_next = 1;
static _Atomic uint64_t pin_gen;

uint64_t ts_tp_pin(const void *p, size_t n)
{
    uint64_t id = 0;

    if (!p || !n)
        return 0;
    pthread_mutex_lock(&pin_mu);
    if (npins < PIN_MAX) {
        id = pin_next++;
        pins[npins++] = (struct ts__pin){ .id = id, .base = p, .len = n };
    }
    pthread_mutex_unlock(&pin_mu);
    return id;
}

void ts_tp_unpin(uint64_t id)
{
    if (!id)
        return;
    pthread_mutex_lock(&pin_mu);
    for (size_t i = 0; i < npins; i++)
        if (pins[i].id == id) {
            pins[i] = pins[--npins];
            atomic_fetch_add(&pin_gen, 1);
            break;
        }
    pthread_mutex_unlock(&pin_mu);
}

bool ts__pin_find(const void *p, size_t n, struct ts__pin *out)
{
    uintptr_t a = (uintptr_t)p;
    bool found = false;

    pthread_mutex_lock(&pin_mu);
    for (size_t i = 0; i < npins && !found; i++) {
        uintptr_t b = (uintptr_t)pins[i].base;
        if (a >= b && n <= pins[i].len && a - b <= pins[i].len - n) {
            *out = pins[i];
            found = true;
        }
    }
    pthread_mutex_unlock(&pin_mu);
    return found;
}

bool ts__pin_alive(uint64_t id)
{
    bool alive = false;

    pthread_mutex_lock(&pin_mu);
    for (size_t i = 0; i < npins && !alive; i++)
        alive = pins[i].id == id;
    pthread_mutex_unlock(&pin_mu);
    return alive;
}

uint64_t ts__pin_gen(void)
{
    return atomic_load(&pin_gen);
}
