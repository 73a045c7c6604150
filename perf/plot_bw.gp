# perf/plot_bw.gp: plots perf/bw_vs_size.csv (written by perf/bw_vs_size.sh) as a PNG.
#   gnuplot -e "csv='perf/bw_vs_size.csv'; png='perf/bw_vs_size.png'; ttl='...'" perf/plot_bw.gp
# CSV columns: size_bytes, write_GBps, read_GBps, memcpy_GBps (an empty cell is not plotted).
if (!exists("csv")) csv = 'perf/bw_vs_size.csv'
if (!exists("png")) png = 'perf/bw_vs_size.png'
if (!exists("ttl")) ttl = 'vrnic loopback bandwidth vs message size'

set terminal pngcairo size 1200,750 font 'sans,11'
set output png
set datafile separator ','
set datafile missing ''
set title ttl
set key top left box opaque
set grid xtics ytics
set logscale x 2
set format x '2^{%L}'
set xtics 4
set xrange [1:16777216]
set yrange [0:*]
set xlabel 'message size (bytes, log2 scale)'
set ylabel 'bandwidth (GB/s, 1 GB = 10^9 bytes)'
plot csv using 1:2 skip 1 with linespoints lw 2 pt 7 ps 0.8 title 'vrnic RDMA WRITE (ib\_write\_bw)', \
     ''  using 1:3 skip 1 with linespoints lw 2 pt 5 ps 0.8 title 'vrnic RDMA READ (ib\_read\_bw)', \
     ''  using 1:4 skip 1 with linespoints lw 2 pt 9 ps 0.8 dt 2 title 'memcpy, one core (memcpy\_bw)'
