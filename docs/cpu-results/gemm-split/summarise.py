import sys,re,statistics as st
d={}
for line in open(sys.argv[1]):
    m=re.match(r'Benchmark\w+/(\S+)/threads=(\d)-2\s+\d+\s+([\d.]+) ns/op.*?([\d.]+) GFLOP/s',line)
    if m: d.setdefault(m.group(1),{}).setdefault(m.group(2),[]).append(float(m.group(4)))
print("%-16s %28s %28s %6s"%("shape","1 thread GF/s (med, min-max)","2 threads","2/1"))
for k,v in d.items():
    a=v.get('1',[0]);b=v.get('2',[0])
    print("%-16s %10.1f (%5.1f-%5.1f) n=%d %10.1f (%5.1f-%5.1f) n=%d %5.2f"%(k,st.median(a),min(a),max(a),len(a),st.median(b),min(b),max(b),len(b),st.median(b)/st.median(a)))
