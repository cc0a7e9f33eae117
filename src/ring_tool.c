/* ringleader-ring: STUB. */
#include "config.h"

#include <stdio.h>

int main(void)
{
    fprintf(stderr, "ringleader-ring: not built yet\n");
    return 1;
}
