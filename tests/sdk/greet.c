/*  greet - the README's "Writing a component in C" example, built by
    tests/sdk/check-install.sh against an installed dsh with nothing but
    `pkg-config --cflags --libs libdsh`. Keep the two in step. */

#include <dsh.h>

static const dsh_param_t greet_params [] = {
    { .name = "who", .type = DSH_TYPE_STRING, .required = true, .description = "whom to greet" },
    { .name = NULL }
};
static const dsh_tooldef_t greet = {
    .name = "greet", .description = "Say hello", .params = greet_params,
    .read_only = DSH_HINT_TRUE, .concurrency_safe = true
};

static int
s_greet (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) arg;
    dsh_result_textf (result, "hello, %s", dsh_call_string (call, "who", "world"));
    return 0;
}

int
main (void)
{
    dsh_provider_t *provider = dsh_provider_new (NULL, "greeter", 4);   //  NULL: $DSH_BROKER or default
    dsh_provider_add (provider, &greet, s_greet, NULL);
    dsh_provider_start (provider);                                      //  one ANNOUNCE of all its tools
    while (!zsys_interrupted)
        zclock_sleep (100);
    dsh_provider_destroy (&provider);                                   //  withdraws its tools
    return 0;
}
