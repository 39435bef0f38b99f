/*  =========================================================================
    test_calltrace - dsh_calltrace with tracing off (as every unit test
    runs): a caller's valid context is the call's and nothing is stamped,
    an invalid one is not read, a stamp splices once then overwrites in
    place, and a RESULT gets one traceparent with its entries kept (the
    class's self test, dsh_calltrace_test)
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dsh_calltrace.h"

static void
test_selftest (void **state)
{
    (void) state;
    dsh_calltrace_test (false);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_selftest),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
