"""Configuration text: twemproxy-style pools (yaml_dump), nested documents (ydump) and
server lines."""


def yaml_scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    s = str(v)
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


def yaml_dump(pools):
    """pools: {name: {key: scalar | [scalars]}} -> twemproxy-style YAML text."""
    out = []
    for name, pool in pools.items():
        out.append("%s:" % name)
        for k, v in pool.items():
            if isinstance(v, (list, tuple)):
                out.append("  %s:" % k)
                out.extend("   - %s" % yaml_scalar(x) for x in v)
            else:
                out.append("  %s: %s" % (k, yaml_scalar(v)))
    return "\n".join(out) + "\n"


def ydump(obj, indent=0):
    """YAML text for nested dicts and lists of scalars (a whole configuration file with
    mapping-valued keys such as `shadow:` or a `ringleader:` block; yaml_dump writes the
    flat twemproxy form); a dict inside a list is written in flow style."""
    pad = " " * indent
    out = []
    for k, v in obj.items():
        if isinstance(v, dict):
            out.append("%s%s:" % (pad, k))
            out.append(ydump(v, indent + 2))
        elif isinstance(v, (list, tuple)):
            out.append("%s%s:" % (pad, k))
            for x in v:
                if isinstance(x, dict):
                    out.append("%s - {%s}" % (pad, ", ".join(
                        "%s: %s" % (a, yaml_scalar(b)) for a, b in x.items())))
                else:
                    out.append("%s - %s" % (pad, yaml_scalar(x)))
        else:
            out.append("%s%s: %s" % (pad, k, yaml_scalar(v)))
    return "\n".join(out)


def server_lines(backends, names=None, weights=None):
    lines = []
    for i, be in enumerate(backends):
        s = "%s:%d" % (be.hostport(), weights[i] if weights else 1)
        if names:
            s += " " + names[i]
        lines.append(s)
    return lines
