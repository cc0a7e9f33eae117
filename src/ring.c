/* struct ring: STUB, filled in by the placement work. */
#include "config.h"

#include "ring.h"
