# Medians over interleaved rounds of pipeline-bench, old (f0c74e6, before variable-size items)
# vs new; ratio = new / old per round, then its median.
import glob, statistics as st
def rows(f):
    d = {}
    for l in open(f):
        p = l.split()
        if len(p) == 7 and p[0].isdigit() and p[1].isdigit():
            d[(p[0], p[1])] = float(p[2])
    return d
print("item producers old_it/s new_it/s median(new/old) per-round")
for key in [('64','1'),('64','2'),('64','4'),('4096','1'),('4096','2'),('4096','4')]:
    o = [rows(f)[key] for f in sorted(glob.glob('old-*.txt'))]
    n = [rows(f)[key] for f in sorted(glob.glob('new-*.txt'))]
    r = [b / a for a, b in zip(o, n)]
    print(*key, int(st.median(o)), int(st.median(n)), round(st.median(r), 3), [round(x, 2) for x in r])
