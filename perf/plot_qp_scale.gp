# perf/plot_qp_scale.gp: plots the qp_scale.csv that perf/bench_qp_scale.sh writes.
#   gnuplot -e "csv='...qp_scale.csv'; png='...qp_scale.png'" perf/plot_qp_scale.gp
# Columns used: 1 qps, 2 all-active msgs/s, 5 all-active normalised vs one pair, 6 two-active
# msgs/s, 8 two-active normalised vs one pair (-q 2 -k 64; each run normalised by memcpy over
# its own working set).
if (!exists("csv")) csv = 'qp_scale.csv'
if (!exists("png")) png = 'qp_scale.png'
set terminal pngcairo size 1200,750 font 'sans,11'
set output png
set datafile separator ','
set datafile missing ''
if (!exists("where")) where = 'one vrnicd, loop port'
set title sprintf('vrnic: 4 KiB RDMA WRITE against the number of RC QPs (%s)', where)
set key top right box opaque
set grid xtics ytics
set logscale x 2
set xlabel 'RC QPs (log2 scale)'
set ylabel 'messages/s'
set y2label 'vs one QP pair (each normalised by memcpy over its working set)'
set y2tics
set ytics nomirror
set yrange [0:*]
set y2range [0:*]
plot csv using 1:2 skip 1 axes x1y1 with linespoints lw 2 pt 7 title 'all active: msgs/s', \
     ''  using 1:6 skip 1 axes x1y1 with linespoints lw 2 pt 5 title '2 active, the rest idle: msgs/s', \
     ''  using 1:5 skip 1 axes x1y2 with linespoints lw 2 pt 9 dt 2 title 'all active, vs one pair', \
     ''  using 1:8 skip 1 axes x1y2 with linespoints lw 2 pt 11 dt 2 title '2 active, vs one pair'
