/* YAML configuration loader: STUB, filled in by the configuration work. */
#include "config.h"

#include "conf.h"
