/* Telling the service manager (and the -d parent) where start-up, reloads and shutdown are. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include "control/daemon.h"
#include "control/notify.h"

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#define NOTIFY(text) sd_notify(0, text)
#else
#define NOTIFY(text) ((void)0)
#endif

void notify_ready(void)
{
    daemon_ready();
    NOTIFY("READY=1");
}

void notify_reloading(void)
{
    NOTIFY("RELOADING=1");
}

void notify_stopping(void)
{
    NOTIFY("STOPPING=1");
}

void notify_mainpid(pid_t pid)
{
#ifdef HAVE_LIBSYSTEMD
    sd_notifyf(0, "MAINPID=%d", (int)pid);
#else
    (void)pid;
#endif
}

void notify_status(const char *fmt, ...)
{
#ifdef HAVE_LIBSYSTEMD
    char text[256] = "STATUS=";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text + 7, sizeof(text) - 7, fmt, ap);
    va_end(ap);
    sd_notify(0, text);
#else
    (void)fmt;
#endif
}
