# perf/plot_direct_lat.gp: plots the direct_lat.csv that perf/bench_direct_lat.sh writes.
#   gnuplot -e "csv='...direct_lat.csv'; png='...direct_lat.png'" perf/plot_direct_lat.gp
# Columns: 1 op, 2 size, 3/4 direct t_typical/99%, 5/6 worker t_typical/99% (microseconds).
if (!exists("csv")) csv = 'direct_lat.csv'
if (!exists("png")) png = 'direct_lat.png'
set terminal pngcairo size 1200,750 font 'sans,11'
set output png
set termoption noenhanced
set datafile separator ','
set title 'vrnic: perftest latency between two processes on one host, direct path against the worker path'
set key outside right box opaque
set grid xtics ytics
set logscale xy
set xlabel 'message size, bytes (log scale)'
set ylabel 'latency, us (log scale): median (solid), 99th percentile (dashed)'
op(name, col) = (strcol(1) eq name ? column(col) : NaN)
plot for [o in "ib_write ib_read ib_send ib_atomic"] \
       csv using 2:(op(o, 3)) skip 1 with linespoints lw 2 pt 7 title o.' direct, median', \
     for [o in "ib_write ib_read ib_send ib_atomic"] \
       csv using 2:(op(o, 4)) skip 1 with linespoints lw 1 pt 7 dt 2 title o.' direct, 99%', \
     for [o in "ib_write ib_read ib_send ib_atomic"] \
       csv using 2:(op(o, 5)) skip 1 with linespoints lw 2 pt 5 title o.' worker, median', \
     for [o in "ib_write ib_read ib_send ib_atomic"] \
       csv using 2:(op(o, 6)) skip 1 with linespoints lw 1 pt 5 dt 2 title o.' worker, 99%'
