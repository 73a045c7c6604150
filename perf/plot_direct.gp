# perf/plot_direct.gp: plots the direct.csv that perf/bench_direct.sh writes.
#   gnuplot -e "csv='...direct.csv'; png='...direct.png'" perf/plot_direct.gp
# Columns: 1 size, 2/3 k=1 direct/worker msgs/s, 7/8 k=64 direct/worker msgs/s.
if (!exists("csv")) csv = 'direct.csv'
if (!exists("png")) png = 'direct.png'
set terminal pngcairo size 1200,750 font 'sans,11'
set output png
set datafile separator ','
set title 'vrnic: RDMA WRITE between two QPs of one process, direct path against the worker path'
set key top right box opaque
set grid xtics ytics
set logscale xy
set xlabel 'bytes per WRITE (log scale)'
set ylabel 'messages/s (log scale)'
plot csv using 1:2 skip 1 with linespoints lw 2 pt 7 title '1 outstanding, direct path', \
     ''  using 1:3 skip 1 with linespoints lw 2 pt 7 dt 2 title '1 outstanding, worker path', \
     ''  using 1:7 skip 1 with linespoints lw 2 pt 5 title '64 outstanding, direct path', \
     ''  using 1:8 skip 1 with linespoints lw 2 pt 5 dt 2 title '64 outstanding, worker path'
