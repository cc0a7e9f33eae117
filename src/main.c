/* ringleader: STUB. */
#include "config.h"

#include <stdio.h>

int main(void)
{
    printf("This is ringleader-%s\n", PACKAGE_VERSION);
    return 0;
}
